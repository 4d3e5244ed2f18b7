package client

import (
	"slices"
	"testing"

	"github.com/synapse-hub/synapse/hub"
)

// A scoped client gets presence in the compact form (no online_agents);
// Online folds it, as it folds the reference's form, into who is online
// (docs/protocol.md "Presence", PROTOCOL.md §2.14).
func TestOnline_FollowsBothPresenceForms(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	for _, scoped := range []bool{false, true} {
		name := map[bool]string{false: "full/watcher", true: "scoped/watcher"}[scoped]
		w := th.dial(t, name, func(o *Options) {
			o.Fanout = map[bool]Fanout{false: FanoutFull, true: FanoutOwn}[scoped]
			o.Presence = map[bool]Presence{false: PresenceFull, true: PresenceCompact}[scoped]
		})
		ctx := testCtx(t)
		frames := w.Subscribe(ctx, func(f Frame) bool { return f.Type == "presence_update" })
		var on Online
		on.Reset(append(w.Welcome().OnlineAgents, name))
		follow := func(want []string) {
			t.Helper()
			slices.Sort(want)
			for !slices.Equal(on.Names(), want) {
				f := recv(t, frames, "presence_update")
				if scoped == f.Has("online_agents") {
					t.Fatalf("scoped %v got %s", scoped, f.Raw)
				}
				on.Apply(f)
			}
		}
		a := th.dial(t, "p/a")
		b := th.dial(t, "p/b")
		follow([]string{name, "p/a", "p/b"})
		a.Close()
		follow([]string{name, "p/b"})
		b.Close()
		w.Close()
	}
}

func TestOnline_AppliesEachShape(t *testing.T) {
	var on Online
	on.Reset([]string{"a", "b"})
	for _, tc := range []struct {
		frame string
		want  []string
	}{
		{`{"type":"presence_update","online_agents":["a","c"],"event":"joined","agent":"c"}`, []string{"a", "c"}},
		{`{"type":"presence_update","event":"joined","agent":"d","joined":["d","e"],"left":["a"],"online_count":3}`, []string{"c", "d", "e"}},
		{`{"type":"presence_update","event":"joined","agent":"c","joined":["c"],"left":["c"],"online_count":3}`, []string{"c", "d", "e"}},
		{`{"type":"presence_update","event":"left","agent":"e"}`, []string{"c", "d"}},
		{`{"type":"chat","payload":"not presence"}`, []string{"c", "d"}},
	} {
		f, err := parseFrame([]byte(tc.frame))
		if err != nil {
			t.Fatal(err)
		}
		if on.Apply(f) != (f.Type == "presence_update") {
			t.Errorf("Apply(%s) misreports its type", tc.frame)
		}
		if got := on.Names(); !slices.Equal(got, tc.want) {
			t.Errorf("after %s: %v, want %v", tc.frame, got, tc.want)
		}
	}
}
