package access

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The permission vocabulary, the reference's (its core/acl.py PERMISSIONS;
// PROTOCOL.md §5.6 maps frames to them). This hub enforces message, claim,
// release, board, recall, namespace, role-claim and identity-pin-reclaim
// on frames (private channels' verbs are message and recall on kind
// channel), and observe on reads (state, board, who); the rest parse, so a
// reference policy loads, and grant nothing here yet.
const (
	PermMessage     = "message"
	PermClaim       = "claim"
	PermRelease     = "release"
	PermBoard       = "board"
	PermMetrics     = "metrics"
	PermDashboard   = "dashboard"
	PermA2A         = "a2a"
	PermNamespace   = "namespace"
	PermSandbox     = "sandbox"
	PermObserve     = "observe"
	PermMailbox     = "mailbox"
	PermRoleClaim   = "role-claim"
	PermPinReclaim  = "identity-pin-reclaim"
	PermEvidence    = "evidence"
	PermRecall      = "recall"
	EffectAllow     = "allow"
	EffectDeny      = "deny"
	DefaultDenyRule = "default-deny" // the rule a refusal names when no rule matched
)

// Permissions is every permission a rule may name.
var Permissions = []string{PermMessage, PermClaim, PermRelease, PermBoard, PermMetrics, PermDashboard, PermA2A,
	PermNamespace, PermSandbox, PermObserve, PermMailbox, PermRoleClaim, PermPinReclaim, PermEvidence, PermRecall}

// ErrPolicy wraps every reason a policy file is refused.
var ErrPolicy = errors.New("access: invalid ACL policy")

// Rule is one access rule. The file form is the reference's
// ({"rules":[{permission, target_kind, target_pattern, namespace,
// reason}]}) with three additive fields: id (named by every decision it
// makes; default "rule-<index>"), principal (a name pattern the rule is
// for; default "*", everyone) and effect ("allow", the default, or
// "deny", which wins over every allow).
type Rule struct {
	ID            string `json:"id"`
	Effect        string `json:"effect"`
	Principal     string `json:"principal"`
	Permission    string `json:"permission"`
	TargetKind    string `json:"target_kind"`
	TargetPattern string `json:"target_pattern"`
	Namespace     string `json:"namespace,omitempty"` // the principal's namespace must be this one; "" = any
	Reason        string `json:"reason,omitempty"`
}

// compiled is a rule as Decide reads it: its patterns compiled, its
// decision made in advance.
type compiled struct {
	namespace         string
	principal, target glob
	decision          Decision
}

// matches reports whether c applies to q (its effect aside).
func (c *compiled) matches(q *Request, ns string) bool {
	return (c.namespace == "" || c.namespace == ns) && c.target.match(q.Value) && c.principal.match(q.Principal)
}

// Request is one access to decide: principal (the socket's bound name)
// wants permission on the target kind:value.
type Request struct {
	Principal  string
	Permission string
	Kind       string
	Value      string
}

// String is the request as `synapse acl check` and refusals print it.
func (q Request) String() string { return q.Permission + " on " + q.Kind + ":" + q.Value }

// Decision is the answer to a Request.
type Decision struct {
	Allow  bool   `json:"allow"`
	Rule   string `json:"rule"`   // the deciding rule's id, or DefaultDenyRule
	Index  int    `json:"index"`  // its index in the file; -1 for the default
	Reason string `json:"reason"` // the rule's reason, or why it was denied by default
}

// Policy is a parsed set of rules with its index. A Policy is immutable:
// reload builds a new one and the hub swaps the pointer.
type Policy struct {
	rules []Rule
	comp  []compiled
	index map[indexKey]*bucket
}

// indexKey finds the rules that can decide a request: its permission and
// target kind.
type indexKey struct{ perm, kind string }

// bucket holds the rules of one permission and kind, split by the
// namespace their principal pattern fixes (byNS) or not (any), deny rules
// apart from allow rules; each list in file order.
type bucket struct {
	byNS map[string]*ruleLists
	any  ruleLists
}

type ruleLists struct{ deny, allow []int32 }

var noRules ruleLists // read only

// Rules returns a copy of the rules, in file order, defaults filled in.
func (p *Policy) Rules() []Rule { return slices.Clone(p.rules) }

// Len is the number of rules.
func (p *Policy) Len() int { return len(p.rules) }

// Decide decides q, deny by default: a matching deny rule refuses, else the
// first matching allow rule (in file order) allows, else DefaultDenyRule
// refuses. Only the rules of q's permission and kind whose principal
// pattern can match q's namespace are looked at.
func (p *Policy) Decide(q Request) Decision {
	b := p.index[indexKey{q.Permission, q.Kind}]
	if b == nil {
		return defaultDeny(q)
	}
	ns := NamespaceOf(q.Principal)
	var own *ruleLists
	if b.byNS != nil {
		own = b.byNS[ns]
	}
	if own == nil {
		own = &noRules
	}
	if i, ok := p.first(own.deny, b.any.deny, &q, ns); ok {
		return p.comp[i].decision
	}
	if i, ok := p.first(own.allow, b.any.allow, &q, ns); ok {
		return p.comp[i].decision
	}
	return defaultDeny(q)
}

// first is the lowest index of a rule in a or b (each ascending) that
// matches q.
func (p *Policy) first(a, b []int32, q *Request, ns string) (int32, bool) {
	for len(a) > 0 || len(b) > 0 {
		var i int32
		if len(b) == 0 || (len(a) > 0 && a[0] < b[0]) {
			i, a = a[0], a[1:]
		} else {
			i, b = b[0], b[1:]
		}
		if p.comp[i].matches(q, ns) {
			return i, true
		}
	}
	return 0, false
}

func decisionOf(r *Rule, i int) Decision {
	reason := r.Reason
	if reason == "" {
		reason = r.Effect + "ed by rule " + r.ID
	}
	return Decision{Allow: r.Effect == EffectAllow, Rule: r.ID, Index: i, Reason: reason}
}

func defaultDeny(q Request) Decision {
	return Decision{Rule: DefaultDenyRule, Index: -1, Reason: "no rule grants " + q.String() + " (deny by default)"}
}

// maxRules bounds a policy file, so a reload cannot make the hub build an
// index of unbounded size.
const maxRules = 100_000

// Parse reads a policy file: a JSON object with a "rules" list, each rule
// an object with the fields of Rule. Unknown fields are refused (a typo in
// "principal" must not widen a rule to everyone), as are unknown
// permissions or effects, blank target kinds or patterns, and duplicate
// ids. Values are trimmed of surrounding white space, as the reference
// does.
func Parse(data []byte) (*Policy, error) {
	var file map[string]json.RawMessage
	if err := json.Unmarshal(data, &file); err != nil || file == nil {
		if err == nil {
			err = errors.New("null")
		}
		return nil, fmt.Errorf("%w: the policy must be a JSON object with a \"rules\" list: %v", ErrPolicy, err)
	}
	for k := range file {
		if k != "rules" {
			return nil, fmt.Errorf("%w: unknown field %q (the policy object holds only \"rules\")", ErrPolicy, k)
		}
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(file["rules"], &raw); err != nil || raw == nil {
		return nil, fmt.Errorf("%w: the policy must be an object with a \"rules\" list", ErrPolicy)
	}
	if len(raw) > maxRules {
		return nil, fmt.Errorf("%w: %d rules, at most %d", ErrPolicy, len(raw), maxRules)
	}
	rules := make([]Rule, len(raw))
	ids := make(map[string]int, len(raw))
	for i, m := range raw {
		r, err := parseRule(m)
		if err == nil {
			err = r.normalise(i)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: rule %d: %v", ErrPolicy, i, err)
		}
		if j, dup := ids[r.ID]; dup {
			return nil, fmt.Errorf("%w: rule %d: id %q is rule %d's too", ErrPolicy, i, r.ID, j)
		}
		ids[r.ID] = i
		rules[i] = r
	}
	return NewPolicy(rules), nil
}

// parseRule reads one rule object. Keys match exactly (encoding/json's
// struct decoding would take "PRINCIPAL" for principal), and each value
// must be a string.
func parseRule(m json.RawMessage) (Rule, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(m, &obj); err != nil || obj == nil {
		return Rule{}, errors.New("not an object")
	}
	var r Rule
	fields := map[string]*string{"id": &r.ID, "effect": &r.Effect, "principal": &r.Principal, "permission": &r.Permission,
		"target_kind": &r.TargetKind, "target_pattern": &r.TargetPattern, "namespace": &r.Namespace, "reason": &r.Reason}
	for k, v := range obj {
		f := fields[k]
		if f == nil {
			return Rule{}, fmt.Errorf("unknown field %q", k)
		}
		if err := json.Unmarshal(v, f); err != nil || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return Rule{}, fmt.Errorf("field %q must be a string", k)
		}
	}
	return r, nil
}

// normalise trims r, fills in its defaults and validates it.
func (r *Rule) normalise(i int) error {
	for _, f := range []*string{&r.ID, &r.Effect, &r.Principal, &r.Permission, &r.TargetKind, &r.TargetPattern, &r.Namespace, &r.Reason} {
		*f = strings.TrimSpace(*f)
	}
	if r.ID == "" {
		r.ID = "rule-" + strconv.Itoa(i)
	}
	if r.Effect == "" {
		r.Effect = EffectAllow
	}
	if r.Principal == "" {
		r.Principal = "*"
	}
	switch {
	case r.Effect != EffectAllow && r.Effect != EffectDeny:
		return fmt.Errorf("effect %q: give \"allow\" or \"deny\"", r.Effect)
	case !slices.Contains(Permissions, r.Permission):
		return fmt.Errorf("unknown permission %q: give one of %s", r.Permission, strings.Join(Permissions, ", "))
	case r.TargetKind == "" || r.TargetPattern == "":
		return errors.New("needs a non-empty target_kind and target_pattern")
	}
	return nil
}

// NewPolicy indexes rules that are already valid (Parse's, or a test's).
func NewPolicy(rules []Rule) *Policy {
	p := &Policy{rules: rules, comp: make([]compiled, len(rules)), index: make(map[indexKey]*bucket)}
	for i := range rules {
		r := &rules[i]
		p.comp[i] = compiled{namespace: r.Namespace, principal: compileGlob(r.Principal), target: compileGlob(r.TargetPattern),
			decision: decisionOf(r, i)}
		k := indexKey{r.Permission, r.TargetKind}
		b := p.index[k]
		if b == nil {
			b = &bucket{}
			p.index[k] = b
		}
		l := &b.any
		if ns, ok := literalNamespace(r.Principal); ok {
			if b.byNS == nil {
				b.byNS = make(map[string]*ruleLists)
			}
			if l = b.byNS[ns]; l == nil {
				l = &ruleLists{}
				b.byNS[ns] = l
			}
		}
		if r.Effect == EffectDeny {
			l.deny = append(l.deny, int32(i))
		} else {
			l.allow = append(l.allow, int32(i))
		}
	}
	return p
}
