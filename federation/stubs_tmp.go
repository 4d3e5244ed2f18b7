package federation

import "errors"

// TEMPORARY: replaced by the helper's observed.go and peerlog.go.

var ErrEquivocation = errors.New("federation: equivocation")

type ObservedLimits struct{}
type ObservedClaim struct{ Hub, TaskID, Owner string }
type ObservedTask struct{ Hub, TaskID string }
type Observed struct{}

func NewObserved(ObservedLimits) *Observed                  { return &Observed{} }
func (o *Observed) Apply(string, Event)                     {}
func (o *Observed) Forget(string)                           {}
func (o *Observed) Claims(float64) []ObservedClaim          { return nil }
func (o *Observed) Board() []ObservedTask                   { return nil }
func (o *Observed) Asserting(float64) map[string][]string   { return nil }

type PeerLog struct{ c int64 }

func NewPeerLog(string, int64, int) *PeerLog                  { return &PeerLog{} }
func (l *PeerLog) Cursor() int64                              { return l.c }
func (l *PeerLog) Accept(e []Event) ([]Event, error)          { return e, nil }
func (l *PeerLog) AcceptFrom(int64, []Event) ([]Event, error) { return nil, nil }
