package hub

// Task-bound claims on a fleet (issue 22): a board task may depend on tasks
// of namespaces other hubs own, which are not on the owner's board. Before
// such a claim enters the sequencer, its session asks the state which
// dependencies are not on this board (a Query, no wait on etcd) and, if
// any, reads their status from the fleet's board (the mirror, at etcd's
// revision when the read began) on its own goroutine, with its socket
// released; the decision then judges them with the rest. So the sequencer
// never waits on etcd for this, and a dependency marked done through any
// hub before the claim was sent is seen. A dependency changed after the
// read is not: the decision is as of the read, as a grant is as of its
// instant (a dependency reopened a moment later does not take it back
// either). A read that fails decides nothing: the claim is answered
// fleet_unavailable, to be retried.

import (
	"context"

	"github.com/synapse-hub/synapse/coord"
)

// depsElsewhere is the status of the dependencies of board task id that
// are not on this hub's board, as the fleet's board has them now: nil on
// one hub, or when every dependency is here. ok is false when the fleet's
// board could not be read: the sender was told, and nothing is to be
// decided (neither refused as not ready nor granted on a guess).
func (s *session) depsElsewhere(sender, id string) (deps map[string]string, ok bool) {
	h := s.h
	if h.cfg.Fleet == nil || id == "" {
		return nil, true
	}
	v, err := h.seq.Query(context.Background(), func(st *coord.State) any { return st.DepsElsewhere(id) })
	missing, _ := v.([]string)
	if err != nil || len(missing) == 0 {
		return nil, true // a hub closing refuses the submit that follows
	}
	s.releaseBeforeWait()
	snap, err := h.fleetRead(context.Background())
	if err != nil {
		s.fail(sender, "fleet_unavailable", "The fleet's board could not be read from etcd ("+err.Error()+"), so board task '"+id+"' could not be judged ready: nothing was decided. Retry shortly.")
		return nil, false
	}
	out := make(map[string]string, len(missing))
	for _, t := range snap.Tasks { // the last of an id wins, as in coord.ReadyOf over the same list
		for _, d := range missing {
			if t.TaskID == d {
				out[d] = t.Status
			}
		}
	}
	return out, true
}
