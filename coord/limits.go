package coord

// Normative constants of the coordination spec ("Normative constants" table).
// The drift guard test reads the spec and fails when one of these disagrees.
const (
	MinimumTTLSeconds         = 30.0
	MaximumTTLSeconds         = 2592000.0 // 30 days
	DefaultTTLSeconds         = 3600.0
	MaxClaimsPerAgent         = 128
	MaxDeclaredPaths          = 512
	DefaultWorktree           = ""
	DefaultResourceTTLSeconds = 300.0
)

// Limits bounds what one State holds. The zero value of any field means its
// default, so Limits{} is a working configuration.
type Limits struct {
	MinTTL     float64 // shortest lease, seconds (default 30)
	MaxTTL     float64 // longest lease, seconds (default 30 days)
	DefaultTTL float64 // lease when none or a non-finite one is asked for (default 3600)

	MaxClaimsPerPrincipal int // live claims one quota principal may hold (default 128)
	MaxPathsPerClaim      int // distinct paths before a claim widens to its whole worktree (default 512)
	MaxPathLength         int // longer paths widen the claim to its whole worktree (default 4096)

	// MaxRetainedCheckpoints bounds the checkpoints kept for expired claims
	// (the reference keeps them forever); the oldest is forgotten first.
	MaxRetainedCheckpoints int // default 10,000

	ResourceTTL       float64 // seconds an offer lives after its last refresh (default 300)
	MaxOffersPerAgent int     // live offers per agent (default 64)

	MaxWaitsPerAgent int // tasks one agent may wait on at once (default 128)

	MaxBoardTasks     int // tasks on the board (default 100,000)
	MaxNotesTotal     int // progress notes kept (default 5000)
	MaxNotesPerAuthor int // progress notes kept per author (default 1000)
	MaxNotesPerTask   int // progress notes kept per task (default 1000)
}

// DefaultLimits returns the limits a hub runs with when it is given none.
func DefaultLimits() Limits { return Limits{}.withDefaults() }

func (l Limits) withDefaults() Limits {
	setF := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	setI := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	setF(&l.MinTTL, MinimumTTLSeconds)
	setF(&l.MaxTTL, MaximumTTLSeconds)
	setF(&l.DefaultTTL, DefaultTTLSeconds)
	setI(&l.MaxClaimsPerPrincipal, MaxClaimsPerAgent)
	setI(&l.MaxPathsPerClaim, MaxDeclaredPaths)
	setI(&l.MaxPathLength, 4096)
	setI(&l.MaxRetainedCheckpoints, 10000)
	setF(&l.ResourceTTL, DefaultResourceTTLSeconds)
	setI(&l.MaxOffersPerAgent, 64)
	setI(&l.MaxWaitsPerAgent, 128)
	setI(&l.MaxBoardTasks, 100000)
	setI(&l.MaxNotesTotal, 5000)
	setI(&l.MaxNotesPerAuthor, 1000)
	setI(&l.MaxNotesPerTask, 1000)
	return l
}
