package coord

// Offer is a resource an agent offers to the fleet (PROTOCOL.md §2.10). It
// lives ResourceTTL seconds after its last refresh.
type Offer struct {
	Agent     string
	Kind      string
	Name      string
	Capacity  int
	Meta      string // opaque JSON object
	OfferedAt float64
}

// Key is the offer's identity: "<agent>:<kind>:<name>".
func (o *Offer) Key() string { return o.Agent + ":" + o.Kind + ":" + o.Name }
