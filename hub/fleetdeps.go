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
// either).

import (
	"context"

	"github.com/synapse-hub/synapse/coord"
)

// depsElsewhere is the status of the dependencies of board task id that
// are not on this hub's board, as the fleet's board has them now; nil on
// one hub, when every dependency is here, or when the fleet's board could
// not be read (they are then not met: the claim is refused, not granted
// on a guess).
func (s *session) depsElsewhere(sender, id string) map[string]string {
	h := s.h
	if h.cfg.Fleet == nil || id == "" {
		return nil
	}
	v, err := h.seq.Query(context.Background(), func(st *coord.State) any { return st.DepsElsewhere(id) })
	missing, _ := v.([]string)
	if err != nil || len(missing) == 0 {
		return nil
	}
	s.releaseBeforeWait()
	snap, err := h.fleetRead(context.Background())
	if err != nil {
		h.log.Warn("hub: the fleet's board was not read; a task-bound claim's dependencies elsewhere count as not met", "agent", sender, "board_task", id, "err", err)
		return nil
	}
	out := make(map[string]string, len(missing))
	for _, t := range snap.Tasks { // the last of an id wins, as in coord.ReadyOf over the same list
		for _, d := range missing {
			if t.TaskID == d {
				out[d] = t.Status
			}
		}
	}
	return out
}
