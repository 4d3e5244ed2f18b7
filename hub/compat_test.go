package hub

// The compatibility suite: replay the recorded conversations of the
// reference hub (testdata/traces, copied from ../shared/traces; its
// README.md is the contract for everything below) against our hub over real
// sockets and compare every frame field by field after normalising.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/journal"
)

const traceDir = "testdata/traces"

// traceStopPoints are the records a scenario cannot replay yet because they
// need a feature another issue owns. The scenario is checked up to the
// action (send, connect or client close) that starts the segment holding
// that record, then the test logs where it stopped and why. Remove a row when
// its issue lands.
var traceStopPoints = []struct {
	scenario string
	step     int // the first record not replayed
	issue    int
	why      string
}{}

// traceDivergences are reference frames our hub deliberately does not send:
// decisions taken in an issue, not bugs. The replay expects these records
// to be absent (a copy that arrives anyway is an extra frame) and logs them.
var traceDivergences = []struct {
	scenario string
	steps    []int // recv records that must not arrive
	issue    int
	why      string
}{
	{"chat", []int{20, 32, 36, 40, 44, 48, 52, 53}, 5,
		"a directed chat reaches only its recipients and the sender (privacy, issue 5 item 5); the reference relays it to every socket"},
}

// traceAdditiveFields are the fields our frames may carry beyond the
// reference's: documented, additive improvements old clients ignore.
// Anything else extra is a difference.
var traceAdditiveFields = []struct {
	types []string // frame types that may carry it
	field string
	why   string
}{
	{[]string{"error", "claim_denied", "release_denied", "handoff_denied", "checkpoint_denied", "wait_denied", "name_conflict", "auth_denied"},
		"error_code", "issue 4 item 6: every refusal carries a machine-readable error_code"},
	{[]string{"welcome"}, "features", "issue 4 item 6: additive features are announced in welcome"},
	{[]string{"claim_denied", "handoff_denied"}, "holder", "who holds the task or the conflicting scope, so clients need not parse the sentence"},
	{[]string{"claim_denied", "handoff_denied"}, "conflict_task", "the task whose scope conflicts (SCOPE_CONFLICT)"},
	{[]string{"error"}, "task_id", "a verb's refusal names its task, so a client can match it to its request"},
	{[]string{"presence_update"}, "joined", "issue 11 item 4: a presence_update that coalesces several changes lists them (feature presence_delta)"},
	{[]string{"presence_update"}, "left", "issue 11 item 4: a presence_update that coalesces several changes lists them (feature presence_delta)"},
	{[]string{"claim_granted"}, "board_task", "issue 14 item 3: the board task a task-bound claim holds"},
	{[]string{"claim_denied"}, "pending", "issue 14 item 3: BOARD_TASK_NOT_READY names the undone dependencies"},
}

func traceAdditive(frameType, field string) bool {
	for _, a := range traceAdditiveFields {
		if a.field == field && slices.Contains(a.types, frameType) {
			return true
		}
	}
	return false
}

// traceMeta is a trace's header line.
type traceMeta struct {
	Scenario string `json:"scenario"`
	Hub      struct {
		Journal bool    `json:"journal"`
		Token   *string `json:"token"`
	} `json:"hub"`
	HubID       string            `json:"hub_id"`
	Project     string            `json:"project"`
	Names       map[string]string `json:"names"` // letter -> name
	Conns       map[string]string `json:"conns"` // connection label -> letter (or literal name)
	RebasedFrom map[string]int64  `json:"rebased_from"`
}

// traceRecord is one observation: a send, a receive or a close.
type traceRecord struct {
	Step   int             `json:"step"`
	Conn   string          `json:"conn"`
	Dir    string          `json:"dir"` // send | recv | close
	Frame  json.RawMessage `json:"frame"`
	Raw    *string         `json:"raw"`
	Note   string          `json:"note"`
	By     string          `json:"by"` // close: hub | client
	Code   int             `json:"code"`
	Reason string          `json:"reason"`
}

func (r traceRecord) String() string {
	switch r.Dir {
	case "close":
		return fmt.Sprintf("step %d %s: close by %s %d %q", r.Step, r.Conn, r.By, r.Code, r.Reason)
	case "send":
		if r.Raw != nil {
			return fmt.Sprintf("step %d %s: send raw %q (%s)", r.Step, r.Conn, *r.Raw, r.Note)
		}
		return fmt.Sprintf("step %d %s: send %s (%s)", r.Step, r.Conn, r.Frame, r.Note)
	}
	return fmt.Sprintf("step %d %s: recv %s", r.Step, r.Conn, r.Frame)
}

type trace struct {
	Meta    traceMeta
	Records []traceRecord
}

func loadTrace(t testing.TB, file string) trace {
	t.Helper()
	f, err := os.Open(filepath.Join(traceDir, file))
	if err != nil {
		t.Fatalf("open trace: %v", err)
	}
	defer f.Close()
	var tr trace
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for first := true; sc.Scan(); first = false {
		if first {
			if err := json.Unmarshal(sc.Bytes(), &tr.Meta); err != nil {
				t.Fatalf("%s: header: %v", file, err)
			}
			continue
		}
		var r traceRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: record: %v", file, err)
		}
		tr.Records = append(tr.Records, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	sort.SliceStable(tr.Records, func(i, j int) bool { return tr.Records[i].Step < tr.Records[j].Step })
	return tr
}

// traceDecode parses JSON keeping numbers as their lexeme (json.Number).
func traceDecode(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// ---- Normalisation (README "Normalisation") --------------------------------

// traceFamilies maps a counter key to its family.
var traceFamilies = map[string]string{
	"msg_id": "msg_id", "message_id": "msg_id", "since": "msg_id",
	"seq": "seq", "message_seq": "seq", "since_seq": "seq",
	"epoch": "epoch",
}

var (
	traceAnonRe      = regexp.MustCompile(`anon-\d+`)
	traceStaleRe     = regexp.MustCompile(`epoch is stale \(current (-?\d+)\)`)
	traceReceiptIDRe = regexp.MustCompile(`^delivery-receipt:(\d+):(.*)$`)
	tracePlaceRe     = regexp.MustCompile(`^<(msg_id|seq|epoch)\+(\d+)>$`)
)

// traceNormaliser turns frames of one run into the trace's normalised form.
// Bases of the counter families are learned from the first value of each
// family the hub sent (see learn).
type traceNormaliser struct {
	hubID   string
	project string
	names   [][2]string // full name -> letter, longest name first
	bases   map[string]int64
}

func newTraceNormaliser(hubID, project string, letters map[string]string) *traceNormaliser {
	n := &traceNormaliser{hubID: hubID, project: project, bases: map[string]int64{}}
	for letter, name := range letters {
		n.names = append(n.names, [2]string{name, letter})
	}
	sort.Slice(n.names, func(i, j int) bool { return len(n.names[i][0]) > len(n.names[j][0]) })
	return n
}

// text applies the string rules: names to letters, hub id, project, anon ids.
func (n *traceNormaliser) text(s string) string {
	if n.hubID != "" {
		s = strings.ReplaceAll(s, n.hubID, "<hub_id>")
	}
	for _, nl := range n.names {
		s = strings.ReplaceAll(s, nl[0], nl[1])
	}
	if n.project != "" {
		s = strings.ReplaceAll(s, n.project, "<project>")
	}
	return traceAnonRe.ReplaceAllString(s, "anon-<id>")
}

// placeholder rebases v of family fam; when learn is set, the first value
// seen becomes the family's base.
func (n *traceNormaliser) placeholder(fam string, v int64, learn bool) (string, bool) {
	base, ok := n.bases[fam]
	if !ok {
		if !learn {
			return "", false
		}
		base = v
		n.bases[fam] = v
	}
	d := v - base
	if d < 0 {
		return fmt.Sprintf("<%s%d>", fam, d), true
	}
	return fmt.Sprintf("<%s+%d>", fam, d), true
}

func traceIsTimeKey(k string) bool {
	return strings.HasSuffix(k, "timestamp") || strings.HasSuffix(k, "_at") || k == "last_seen" || k == "last_ts"
}

func traceInt(v any) (int64, bool) {
	num, ok := v.(json.Number)
	if !ok || strings.ContainsAny(string(num), ".eE") {
		return 0, false
	}
	i, err := num.Int64()
	return i, err == nil
}

// value normalises one decoded value found under key (key is "" for array
// items and the top level). learn says whether counter values may set a
// family's base: true for frames the hub sent, false for frames we send.
func (n *traceNormaliser) value(key string, v any, learn bool) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for _, k := range traceSortedKeys(x) {
			out[n.text(k)] = n.value(k, x[k], learn)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = n.value("", e, learn)
		}
		return out
	case string:
		switch {
		case key == "hub_id":
			return "<hub_id>"
		case key == "config_epoch":
			return "<config_epoch>"
		case key == "hub_version":
			return "<hub_version>"
		case key == "receipt_notification_id":
			if m := traceReceiptIDRe.FindStringSubmatch(x); m != nil {
				if seq, err := strconv.ParseInt(m[1], 10, 64); err == nil {
					if p, ok := n.placeholder("seq", seq, learn); ok {
						return "delivery-receipt:" + p + ":" + m[2]
					}
				}
			}
		}
		s := n.text(x)
		if m := traceStaleRe.FindStringSubmatchIndex(s); m != nil {
			if e, err := strconv.ParseInt(s[m[2]:m[3]], 10, 64); err == nil {
				if p, ok := n.placeholder("epoch", e, learn); ok {
					s = s[:m[2]] + p + s[m[3]:]
				}
			}
		}
		return s
	case json.Number:
		switch {
		case key == "last_reaction_age":
			return "<duration>"
		case key == "config_epoch":
			return "<config_epoch>"
		case traceIsTimeKey(key):
			if f, err := x.Float64(); err == nil && f > 1e9 {
				return "<ts>"
			}
		case traceFamilies[key] != "":
			i, ok := traceInt(x)
			if !ok || (i == 0 && (key == "since" || key == "since_seq")) {
				return x
			}
			if p, ok := n.placeholder(traceFamilies[key], i, learn); ok {
				return p
			}
		}
		return x
	}
	return v
}

// Frame normalises a frame the hub sent.
func (n *traceNormaliser) Frame(f map[string]any) map[string]any {
	return n.value("", f, true).(map[string]any)
}

func traceSortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ---- Field-by-field comparison ---------------------------------------------

// traceDiff lists the differences between a normalised frame we received
// (got) and the trace's (want). Key order is ignored; numbers must agree in
// kind (an int is not a float, PROTOCOL.md §9.1) and value. extraOK says
// whether a top-level field only we send is allowed.
func traceDiff(path string, got, want any, extraOK func(field string) bool) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: got %s, want an object", path, traceJSON(got))}
		}
		var out []string
		for _, k := range traceSortedKeys(w) {
			gv, present := g[k]
			if !present {
				out = append(out, fmt.Sprintf("%s.%s: missing, want %s", path, k, traceJSON(w[k])))
				continue
			}
			out = append(out, traceDiff(path+"."+k, gv, w[k], nil)...)
		}
		for _, k := range traceSortedKeys(g) {
			if _, present := w[k]; !present && (extraOK == nil || !extraOK(k)) {
				out = append(out, fmt.Sprintf("%s.%s: extra field %s", path, k, traceJSON(g[k])))
			}
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: got %s, want a list", path, traceJSON(got))}
		}
		if len(g) != len(w) {
			return []string{fmt.Sprintf("%s: got %d items %s, want %d items %s", path, len(g), traceJSON(g), len(w), traceJSON(w))}
		}
		var out []string
		for i := range w {
			out = append(out, traceDiff(fmt.Sprintf("%s[%d]", path, i), g[i], w[i], nil)...)
		}
		return out
	case json.Number:
		g, ok := got.(json.Number)
		if !ok {
			return []string{fmt.Sprintf("%s: got %s, want the number %s", path, traceJSON(got), w)}
		}
		gInt, wInt := !strings.ContainsAny(string(g), ".eE"), !strings.ContainsAny(string(w), ".eE")
		gf, _ := g.Float64()
		wf, _ := w.Float64()
		if gInt != wInt || gf != wf {
			return []string{fmt.Sprintf("%s: got %s, want %s", path, g, w)}
		}
		return nil
	default:
		if got != want {
			return []string{fmt.Sprintf("%s: got %s, want %s", path, traceJSON(got), traceJSON(want))}
		}
		return nil
	}
}

func traceJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(b.String())
}

// ---- Sent frames: key order kept, placeholders filled in ----------------------

// traceObject is a JSON object that keeps its key order, so frames go out
// with the reference clients' envelope order (sender, target, type, ...).
type traceObject struct {
	keys []string
	vals map[string]any
}

func (o *traceObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteString(", ")
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteString(": ")
		vb, err := traceMarshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func traceMarshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// traceDecodeOrdered parses JSON into traceObject / []any / string /
// json.Number / bool / nil.
func traceDecodeOrdered(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return traceOrderedValue(dec)
}

func traceOrderedValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch d := tok.(type) {
	case json.Delim:
		if d == '[' {
			list := []any{}
			for dec.More() {
				v, err := traceOrderedValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token()
			return list, err
		}
		obj := &traceObject{vals: map[string]any{}}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k := kt.(string)
			v, err := traceOrderedValue(dec)
			if err != nil {
				return nil, err
			}
			if _, dup := obj.vals[k]; !dup {
				obj.keys = append(obj.keys, k)
			}
			obj.vals[k] = v
		}
		_, err := dec.Token()
		return obj, err
	}
	return tok, nil
}

// traceIdentityFields hold agent names in sent frames (README "Using the
// traces", step 3).
var traceIdentityFields = map[string]bool{"sender": true, "target": true, "to_agent": true, "suggested_owner": true}

// traceSender fills a trace's sent frames in for one run: letters become
// our names, <project> our project, <ts> the current time, and counter
// placeholders our hub's base + N.
type traceSender struct {
	names   map[string]string // letter -> name
	project string
	norm    *traceNormaliser // holds the bases learned from our hub
}

func (s *traceSender) value(key string, v any) (any, error) {
	switch x := v.(type) {
	case *traceObject:
		out := &traceObject{keys: x.keys, vals: make(map[string]any, len(x.vals))}
		for _, k := range x.keys {
			nv, err := s.value(k, x.vals[k])
			if err != nil {
				return nil, err
			}
			out.vals[k] = nv
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			nv, err := s.value("", e)
			if err != nil {
				return nil, err
			}
			out[i] = nv
		}
		return out, nil
	case string:
		if x == "<ts>" {
			return json.Number(strconv.FormatFloat(float64(time.Now().UnixNano())/1e9, 'f', 6, 64)), nil
		}
		if m := tracePlaceRe.FindStringSubmatch(x); m != nil {
			base, ok := s.norm.bases[m[1]]
			if !ok {
				return nil, fmt.Errorf("%s %q: our hub has not sent any %s yet", key, x, m[1])
			}
			off, _ := strconv.ParseInt(m[2], 10, 64)
			return json.Number(strconv.FormatInt(base+off, 10)), nil
		}
		if traceIdentityFields[key] {
			parts := strings.Split(x, ",")
			for i, p := range parts {
				if name, ok := s.names[strings.TrimSpace(p)]; ok {
					parts[i] = name
				}
			}
			x = strings.Join(parts, ",")
		}
		return strings.ReplaceAll(x, "<project>", s.project), nil
	}
	return v, nil
}

// Frame fills in a trace's sent frame.
func (s *traceSender) Frame(raw json.RawMessage) ([]byte, error) {
	v, err := traceDecodeOrdered(raw)
	if err != nil {
		return nil, err
	}
	if v, err = s.value("", v); err != nil {
		return nil, err
	}
	return traceMarshal(v)
}

// Raw fills names into a raw (non-JSON-object) text: a quoted letter is a
// sender or a list item naming an agent.
func (s *traceSender) Raw(text string) string {
	for letter, name := range s.names {
		text = strings.ReplaceAll(text, `"`+letter+`"`, `"`+name+`"`)
	}
	return strings.ReplaceAll(text, "<project>", s.project)
}

// ---- The normaliser checked against the trace files themselves --------------

// Normalising the .raw.jsonl records with our code must give the .jsonl
// records exactly: the self-test of the normaliser the replay relies on.
func TestNormaliser_MatchesTheTraceFiles(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(traceDir, "*.raw.jsonl"))
	if len(files) != 9 {
		t.Fatalf("found %d raw traces in %s, want 9", len(files), traceDir)
	}
	for _, rawFile := range files {
		name := strings.TrimSuffix(filepath.Base(rawFile), ".raw.jsonl")
		t.Run(name, func(t *testing.T) {
			raw, norm := loadTrace(t, name+".raw.jsonl"), loadTrace(t, name+".jsonl")
			if len(raw.Records) != len(norm.Records) {
				t.Fatalf("%d raw records, %d normalised", len(raw.Records), len(norm.Records))
			}
			n := newTraceNormaliser(raw.Meta.HubID, raw.Meta.Project, raw.Meta.Names)
			for i, r := range raw.Records {
				want := norm.Records[i]
				if r.Step != want.Step || r.Conn != want.Conn || r.Dir != want.Dir || r.By != want.By || r.Code != want.Code || r.Reason != want.Reason {
					t.Fatalf("record %d: %v vs %v", i, r, want)
				}
				switch {
				case r.Raw != nil:
					if want.Raw == nil || n.text(*r.Raw) != *want.Raw {
						t.Errorf("step %d: raw text normalises to %q, want %q", r.Step, n.text(*r.Raw), want)
					}
				case r.Frame != nil:
					gv, err := traceDecode(r.Frame)
					if err != nil {
						t.Fatalf("step %d: %v", r.Step, err)
					}
					wv, _ := traceDecode(want.Frame)
					got := n.value("", gv, r.Dir == "recv")
					for _, d := range traceDiff(fmt.Sprintf("step %d", r.Step), got, wv, nil) {
						t.Error(d)
					}
				}
			}
			for fam, base := range norm.Meta.RebasedFrom {
				if n.bases[fam] != base {
					t.Errorf("base of %s: learned %d, the trace says %d", fam, n.bases[fam], base)
				}
			}
			for fam := range n.bases {
				if _, ok := norm.Meta.RebasedFrom[fam]; !ok {
					t.Errorf("learned a base for %s, the trace has none", fam)
				}
			}
		})
	}
}

// Filling a normalised sent frame in and normalising it again gives the
// trace's frame back, key order included.
func TestTraceSender_RoundTripsTheSentFrames(t *testing.T) {
	tr := loadTrace(t, "claims.jsonl")
	letters := map[string]string{"A": "p-1/alpha", "B": "p-1/bravo", "C": "p-1/charlie", "D": "p-1/delta"}
	n := newTraceNormaliser("syn-test", "p-1", letters)
	n.bases = map[string]int64{"epoch": 40}
	s := &traceSender{names: letters, project: "p-1", norm: n}
	for _, r := range tr.Records {
		if r.Dir != "send" || r.Raw != nil {
			continue
		}
		out, err := s.Frame(r.Frame)
		if err != nil {
			t.Fatalf("step %d: %v", r.Step, err)
		}
		ov, _ := traceDecodeOrdered(out)
		wv, _ := traceDecodeOrdered(r.Frame)
		if got, want := ov.(*traceObject).keys, wv.(*traceObject).keys; !slices.Equal(got, want) {
			t.Errorf("step %d: key order %v, want %v", r.Step, got, want)
		}
		gv, _ := traceDecode(out)
		gm := gv.(map[string]any)
		if ts, ok := gm["timestamp"].(json.Number); ok {
			if f, _ := ts.Float64(); f > 1e9 {
				gm["timestamp"] = "<ts>"
			}
		}
		want, _ := traceDecode(r.Frame)
		for _, d := range traceDiff(fmt.Sprintf("step %d", r.Step), n.value("", gm, false), want, nil) {
			t.Error(d)
		}
	}
}

// The stop-point and divergence tables name records that exist: a stop
// point is an action (a send or a client close), a divergence a receive.
func TestTraceTables_NameRealRecords(t *testing.T) {
	find := func(scenario string, step int) (traceRecord, bool) {
		for _, r := range loadTrace(t, scenario+".jsonl").Records {
			if r.Step == step {
				return r, true
			}
		}
		return traceRecord{}, false
	}
	for _, sp := range traceStopPoints {
		if r, ok := find(sp.scenario, sp.step); !ok || !(r.Dir == "send" || r.Dir == "close" && r.By == "client") {
			t.Errorf("stop point %s step %d is not a send or client close: %v", sp.scenario, sp.step, r)
		}
	}
	for _, d := range traceDivergences {
		for _, step := range d.steps {
			if r, ok := find(d.scenario, step); !ok || r.Dir != "recv" {
				t.Errorf("divergence %s step %d is not a receive: %v", d.scenario, step, r)
			}
		}
	}
}

// ---- Replay against our hub -------------------------------------------------

func TestCompat_Handshake(t *testing.T)   { t.Parallel(); replayTrace(t, "handshake") }
func TestCompat_Claims(t *testing.T)      { t.Parallel(); replayTrace(t, "claims") }
func TestCompat_Idempotency(t *testing.T) { t.Parallel(); replayTrace(t, "idempotency") }
func TestCompat_Board(t *testing.T)       { t.Parallel(); replayTrace(t, "board") }
func TestCompat_Chat(t *testing.T)        { t.Parallel(); replayTrace(t, "chat") }
func TestCompat_Mailbox(t *testing.T)     { t.Parallel(); replayTrace(t, "mailbox") }
func TestCompat_Queries(t *testing.T)     { t.Parallel(); replayTrace(t, "queries") }
func TestCompat_Errors(t *testing.T)      { t.Parallel(); replayTrace(t, "errors") }
func TestCompat_Auth(t *testing.T)        { t.Parallel(); replayTrace(t, "auth") }

// traceHub starts a fresh hub configured like the trace's meta.hub.
func traceHub(t *testing.T, meta traceMeta) (*Hub, string) {
	t.Helper()
	cfg := Config{}
	if meta.Hub.Token != nil {
		cfg.Token = *meta.Hub.Token
	}
	var st *journal.Store
	if meta.Hub.Journal {
		var err error
		st, err = journal.Open(filepath.Join(t.TempDir(), "j.db"), journal.Options{})
		if err != nil {
			t.Fatalf("journal: %v", err)
		}
		cfg.Journal = st
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("hub.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("hub close: %v", err)
		}
		if st != nil {
			if err := st.Close(); err != nil {
				t.Errorf("journal close: %v", err)
			}
		}
	})
	return h, tcServe(t, h)
}

func traceProject() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "trace-" + hex.EncodeToString(b)
}

// replayTrace replays one scenario. The records are cut into segments: an
// action (a connection opens right before its first record, a send, a
// client close) followed by the receives and hub closes it caused. After
// each action the test waits for the expected number of events on every
// connection, then for a quiet period, and compares per connection.
func replayTrace(t *testing.T, scenario string) {
	tr := loadTrace(t, scenario+".jsonl")
	stop := -1
	for _, sp := range traceStopPoints {
		if sp.scenario == scenario {
			stop = sp.step
			defer t.Logf("stopped before step %d: %s (waits for issue %d)", sp.step, sp.why, sp.issue)
		}
	}
	for _, d := range traceDivergences {
		if d.scenario == scenario {
			tr.Records = slices.DeleteFunc(tr.Records, func(r traceRecord) bool { return slices.Contains(d.steps, r.Step) })
			t.Logf("steps %v must not arrive: %s", d.steps, d.why)
		}
	}
	h, url := traceHub(t, tr.Meta)
	project := traceProject()
	letters := map[string]string{}
	for letter := range tr.Meta.Names {
		letters[letter] = project + "/" + map[string]string{"A": "alpha", "B": "bravo", "C": "charlie", "D": "delta"}[letter]
	}
	norm := newTraceNormaliser(h.HubID(), project, letters)
	send := &traceSender{names: letters, project: project, norm: norm}

	conns := map[string]*tcConn{}
	var live []*tcConn // open connections, in opening order
	recs := tr.Records
	for i := 0; i < len(recs); {
		r := recs[i]
		if stop >= 0 && r.Step >= stop {
			return
		}
		var action string
		c, opened := conns[r.Conn]
		switch {
		case !opened:
			c = tcDial(t, url, r.Conn)
			conns[r.Conn] = c
			live = append(live, c)
			action = fmt.Sprintf("step %d %s: connect", r.Step, r.Conn)
		case r.Dir == "send":
			if r.Raw != nil {
				c.SendText(send.Raw(*r.Raw))
			} else {
				out, err := send.Frame(r.Frame)
				if err != nil {
					t.Fatalf("%v: %v", r, err)
				}
				c.SendText(string(out))
			}
			action = r.String()
			i++
		case r.Dir == "close" && r.By == "client":
			c.Close()
			live = slices.DeleteFunc(live, func(x *tcConn) bool { return x == c })
			action = r.String()
			i++
		default:
			t.Fatalf("%v: nothing was done that could cause it", r)
		}

		// The receives and hub closes this action caused.
		want := map[*tcConn][]traceRecord{}
		counts := map[*tcConn]int{}
		for ; i < len(recs); i++ {
			e := recs[i]
			ec, ok := conns[e.Conn]
			if !ok || !(e.Dir == "recv" || e.Dir == "close" && e.By == "hub") || (stop >= 0 && e.Step >= stop) {
				break
			}
			want[ec] = append(want[ec], e)
			counts[ec]++
		}
		got := tcCollect(live, counts)
		for _, lc := range live {
			compareSegment(t, action, lc, got[lc], want[lc], norm)
		}
		live = slices.DeleteFunc(live, func(x *tcConn) bool {
			evs := got[x]
			return len(evs) > 0 && evs[len(evs)-1].Closed
		})
	}
}

func compareSegment(t *testing.T, action string, c *tcConn, got []tcEvent, want []traceRecord, norm *traceNormaliser) {
	t.Helper()
	for k := 0; k < max(len(got), len(want)); k++ {
		switch {
		case k >= len(got):
			t.Errorf("after %s: %s received nothing, want %v", action, c.Label, want[k])
		case k >= len(want):
			g := got[k]
			if !g.Closed && g.Frame != nil {
				g.Raw, _ = json.Marshal(norm.Frame(g.Frame))
			}
			t.Errorf("after %s: %s received %s, which the trace does not have", action, c.Label, g)
		default:
			g, w := got[k], want[k]
			switch {
			case w.Dir == "close":
				if !g.Closed || int(g.Code) != w.Code || g.Reason != w.Reason {
					t.Errorf("%v: %s got %s", w, c.Label, g)
				}
			case g.Closed:
				t.Errorf("%v: %s was closed instead (%s)", w, c.Label, g)
			case g.Frame == nil:
				t.Errorf("%v: %s got a frame that is not a JSON object: %q", w, c.Label, g.Raw)
			default:
				wv, err := traceDecode(w.Frame)
				if err != nil {
					t.Fatalf("%v: %v", w, err)
				}
				nf := norm.Frame(g.Frame)
				typ, _ := nf["type"].(string)
				for _, d := range traceDiff("", nf, wv, func(field string) bool { return traceAdditive(typ, field) }) {
					t.Errorf("step %d %s %s: %s", w.Step, c.Label, typ, d)
				}
			}
		}
	}
}
