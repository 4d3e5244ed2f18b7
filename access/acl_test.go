package access

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

const samplePolicy = `{"rules":[
 {"id":"alpha-claims","principal":"alpha/*","permission":"claim","target_kind":"claim","target_pattern":"*"},
 {"id":"alpha-paths","principal":"alpha/*","permission":"claim","target_kind":"path","target_pattern":"src/alpha/*"},
 {"id":"no-secrets","effect":"deny","principal":"*","permission":"claim","target_kind":"path","target_pattern":"*secret*","reason":"secrets are the lead's"},
 {"permission":"message","target_kind":"agent","target_pattern":"*"},
 {"id":"ns-only","permission":"board","target_kind":"board","target_pattern":"*","namespace":"beta"}
]}`

func TestPolicy_DecideNamesTheRule_Issue23(t *testing.T) {
	p, err := Parse([]byte(samplePolicy))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		q     Request
		allow bool
		rule  string
	}{
		{Request{"alpha/x", "claim", "claim", "T1"}, true, "alpha-claims"},
		{Request{"beta/x", "claim", "claim", "T1"}, false, DefaultDenyRule},
		{Request{"alpha/x", "claim", "path", "src/alpha/a.go"}, true, "alpha-paths"},
		{Request{"alpha/x", "claim", "path", "src/alpha/secret.go"}, false, "no-secrets"},
		{Request{"alpha/x", "claim", "path", "src/beta/a.go"}, false, DefaultDenyRule},
		{Request{"anyone", "message", "agent", "proj/x"}, true, "rule-3"},
		{Request{"beta/x", "board", "board", "T"}, true, "ns-only"},
		{Request{"gamma/x", "board", "board", "T"}, false, DefaultDenyRule},
		{Request{"alpha/x", "release", "claim", "T1"}, false, DefaultDenyRule},
	} {
		d := p.Decide(c.q)
		if d.Allow != c.allow || d.Rule != c.rule {
			t.Errorf("%s as %s: %+v, want allow=%v rule=%s", c.q, c.q.Principal, d, c.allow, c.rule)
		}
	}
}

func TestParse_RefusesWithWhatToFix_Issue23(t *testing.T) {
	for _, bad := range []string{
		``, `null`, `[]`, `{}`, `{"rules":null}`, `{"rules":{}}`, `{"rules":[]} x`,
		`{"rules":[null]}`, `{"rules":[1]}`,
		`{"rules":[{"permission":"fly","target_kind":"x","target_pattern":"*"}]}`,
		`{"rules":[{"permission":"claim","target_kind":"","target_pattern":"*"}]}`,
		`{"rules":[{"permission":"claim","target_kind":"claim","target_pattern":"*","principle":"alpha/*"}]}`,
		`{"rules":[{"permission":"claim","target_kind":"claim","target_pattern":"*","effect":"maybe"}]}`,
		`{"rules":[{"permission":"claim","target_kind":"claim","target_pattern":5}]}`,
		`{"rules":[{"id":"a","permission":"claim","target_kind":"c","target_pattern":"*"},{"id":"a","permission":"claim","target_kind":"c","target_pattern":"*"}]}`,
		`{"rules":[], "extra": 1}`,
	} {
		if _, err := Parse([]byte(bad)); !errors.Is(err, ErrPolicy) {
			t.Errorf("Parse(%q) = %v, want ErrPolicy", bad, err)
		}
	}
	// The reference's own form loads: no id, principal or effect.
	ref := `{"rules":[{"permission":"claim","target_kind":"path","target_pattern":"src/*","namespace":"proj","reason":"team"}]}`
	p, err := Parse([]byte(ref))
	if err != nil || p.Len() != 1 || p.Rules()[0].Principal != "*" || p.Rules()[0].ID != "rule-0" {
		t.Fatalf("reference policy: %v %+v", err, p)
	}
}

// naiveParse is an independent definition of Parse: decoded generically,
// validated by hand.
func naiveParse(data []byte) ([]Rule, bool) {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return nil, false
	}
	top, ok := v.(map[string]any)
	if !ok || len(top) != 1 {
		return nil, false
	}
	list, ok := top["rules"].([]any)
	if !ok {
		return nil, false
	}
	known := []string{"id", "effect", "principal", "permission", "target_kind", "target_pattern", "namespace", "reason"}
	var rules []Rule
	seen := map[string]bool{}
	for i, e := range list {
		obj, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		get := map[string]string{}
		for k, v := range obj {
			s, ok := v.(string)
			if !ok || !slices.Contains(known, k) {
				return nil, false
			}
			get[k] = strings.TrimSpace(s)
		}
		or := func(k, def string) string {
			if get[k] == "" {
				return def
			}
			return get[k]
		}
		r := Rule{ID: or("id", fmt.Sprintf("rule-%d", i)), Effect: or("effect", "allow"), Principal: or("principal", "*"),
			Permission: get["permission"], TargetKind: get["target_kind"], TargetPattern: get["target_pattern"],
			Namespace: get["namespace"], Reason: get["reason"]}
		if (r.Effect != "allow" && r.Effect != "deny") || !slices.Contains(Permissions, r.Permission) ||
			r.TargetKind == "" || r.TargetPattern == "" || seen[r.ID] {
			return nil, false
		}
		seen[r.ID] = true
		rules = append(rules, r)
	}
	return rules, true
}

// naiveDecide is an independent definition of Decide: a linear scan.
func naiveDecide(rules []Rule, q Request) (bool, string) {
	applies := func(r Rule) bool {
		return r.Permission == q.Permission && r.TargetKind == q.Kind && Match(r.Principal, q.Principal) &&
			Match(r.TargetPattern, q.Value) && (r.Namespace == "" || r.Namespace == NamespaceOf(q.Principal))
	}
	for _, r := range rules {
		if r.Effect == "deny" && applies(r) {
			return false, r.ID
		}
	}
	for _, r := range rules {
		if r.Effect == "allow" && applies(r) {
			return true, r.ID
		}
	}
	return false, DefaultDenyRule
}

// FuzzACLParse checks Parse and the indexed Decide against naiveParse and
// naiveDecide: they accept the same files, read the same rules, and
// decide every request the same way (Issue23 item 8).
func FuzzACLParse(f *testing.F) {
	f.Add([]byte(samplePolicy), "alpha/x", "claim", "path", "src/alpha/secret.go")
	f.Add([]byte(`{"rules":[{"permission":"claim","target_kind":"claim","target_pattern":"T*","principal":"a*"}]}`), "ab/c", "claim", "claim", "T1")
	f.Add([]byte(`{"rules":[{"permission":"message","target_kind":"agent","target_pattern":"?","principal":"x"},{"effect":"deny","permission":"message","target_kind":"agent","target_pattern":"*","principal":"*/y"}]}`), "x", "message", "agent", "a")
	f.Add([]byte(`{"rules":[{"Permission":"claim","target_kind":"c","target_pattern":"*"}]}`), "a", "claim", "c", "v")
	f.Add([]byte(`{"rules":[]}`), "", "", "", "")
	f.Fuzz(func(t *testing.T, data []byte, principal, perm, kind, value string) {
		p, err := Parse(data)
		want, ok := naiveParse(data)
		if (err == nil) != ok {
			t.Fatalf("Parse err=%v, naive ok=%v on %q", err, ok, data)
		}
		if err != nil {
			return
		}
		if got := p.Rules(); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("rules differ:\n got %+v\nwant %+v", got, want)
		}
		q := Request{principal, perm, kind, value}
		d := p.Decide(q)
		allow, rule := naiveDecide(want, q)
		if d.Allow != allow || d.Rule != rule {
			t.Fatalf("Decide(%+v) = %+v, naive %v %s", q, d, allow, rule)
		}
		// And for each rule, a request built to match it.
		for _, r := range want {
			q := Request{strings.ReplaceAll(r.Principal, "*", "z"), r.Permission, r.TargetKind, strings.ReplaceAll(r.TargetPattern, "*", "")}
			if r.Namespace != "" {
				q.Principal = r.Namespace + "/" + q.Principal
			}
			d := p.Decide(q)
			if allow, rule := naiveDecide(want, q); d.Allow != allow || d.Rule != rule {
				t.Fatalf("Decide(%+v) = %+v, naive %v %s", q, d, allow, rule)
			}
		}
	})
}

// benchPolicy is 1,000 rules over 100 namespaces (claims and paths per
// team, and some wildcard principals), and 10,000 credentials.
func benchPolicy(b *testing.B) (*Policy, *Registry, []string) {
	var rules []Rule
	for i := range 1000 {
		ns := fmt.Sprintf("team%d", i%100)
		r := Rule{ID: fmt.Sprintf("r%d", i), Effect: EffectAllow, Principal: ns + "/*", Permission: PermClaim,
			TargetKind: "path", TargetPattern: fmt.Sprintf("src/%s/m%d/*", ns, i/100)}
		switch {
		case i%50 == 7:
			r.Principal = "*"
			r.Effect = EffectDeny
			r.TargetPattern = fmt.Sprintf("*secret%d*", i)
		case i%10 == 3:
			r.TargetKind, r.TargetPattern = "claim", ns+"-*"
		}
		rules = append(rules, r)
	}
	reg := NewRegistry(nil, nil, nil)
	var toks []string
	for i := range 10000 {
		tok, _, err := reg.Issue(IssueRequest{Pattern: fmt.Sprintf("team%d/*", i%100)}, 1)
		if err != nil {
			b.Fatal(err)
		}
		toks = append(toks, tok)
	}
	return NewPolicy(rules), reg, toks
}

// BenchmarkDecision is one ACL decision at 1,000 rules (the target of
// issue 23 item 7: ≤ 2 µs).
func BenchmarkDecision(b *testing.B) {
	p, _, _ := benchPolicy(b)
	q := Request{"team42/agent-7", PermClaim, "path", "src/team42/m9/x.go"}
	if d := p.Decide(q); !d.Allow {
		b.Fatalf("bench request denied: %+v", d)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(q)
	}
}

// BenchmarkDecisionDenied is a request no rule grants (every candidate is
// looked at).
func BenchmarkDecisionDenied(b *testing.B) {
	p, _, _ := benchPolicy(b)
	q := Request{"team42/agent-7", PermClaim, "path", "src/elsewhere/x.go"}
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(q)
	}
}

// BenchmarkAuthenticate is a connect's credential lookup among 10,000.
func BenchmarkAuthenticate(b *testing.B) {
	_, reg, toks := benchPolicy(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := reg.Authenticate(toks[i%len(toks)], 2); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
