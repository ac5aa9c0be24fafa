package hold

import (
	"cmp"
	"slices"

	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/marks"
)

// mark is what the controller last decided for one object.
type mark struct {
	// held: the object is held (the decision holds it).
	held bool
	// quiet: it is held, its fields are at their held values and its
	// actuator has reported nothing running for QuietFor.
	quiet bool
	// activity says what still runs when it is held and not quiet.
	activity string
}

// Progress is where the holding of one domain's actuators stands.
type Progress struct {
	// Resolved is false until every configured kind was looked up once:
	// until then, what is served is not known.
	Resolved bool
	// Kinds are the configured kinds the API server serves, by name
	// (Kind.group), sorted.
	Kinds []KindProgress
	// Unserved names the configured kinds the API server does not serve
	// (yet): nothing of theirs can exist, and so none is held.
	Unserved []string
}

// KindProgress is where the holding of one kind's objects stands.
type KindProgress struct {
	// Kind is the kind's name, Kind.group (CronJob.batch).
	Kind string
	// Started is false until the controller began deciding its objects
	// for some state; Key is that state, and Pending counts the objects
	// not decided for it yet.
	Started bool
	Key     fencestate.Key
	Pending int
	// Total counts the objects of a held kind decided; Held those held,
	// and Quiet those held and quiet.
	Total, Held, Quiet int
	// Activity is what still runs, for up to MaxActivity held objects
	// that are not quiet, sorted.
	Activity []string
}

// MaxActivity bounds the activities a KindProgress lists.
const MaxActivity = 3

// Decided reports whether every object of every kind has been decided for
// the state key.
func (p Progress) Decided(key fencestate.Key) bool {
	if !p.Resolved {
		return false
	}
	for _, k := range p.Kinds {
		if !k.Started || k.Key != key || k.Pending > 0 {
			return false
		}
	}
	return true
}

// Counts returns how many objects are held, and how many of those are
// quiet, over every kind.
func (p Progress) Counts() (held, quiet int) {
	for _, k := range p.Kinds {
		held += k.Held
		quiet += k.Quiet
	}
	return held, quiet
}

// kindProgress reads one kind's tracker.
func kindProgress(kind string, t *marks.Tracker[mark]) KindProgress {
	p := KindProgress{Kind: kind}
	t.Read(func(v marks.View[mark]) {
		p.Started, p.Key, p.Pending, p.Total = v.Started, v.Key, v.Pending, len(v.Values)
		for _, m := range v.Values {
			if !m.held {
				continue
			}
			p.Held++
			if m.quiet {
				p.Quiet++
			} else if m.activity != "" {
				p.Activity = append(p.Activity, m.activity)
			}
		}
	})
	slices.Sort(p.Activity)
	if len(p.Activity) > MaxActivity {
		p.Activity = p.Activity[:MaxActivity]
	}
	return p
}

func sortKinds(kinds []KindProgress) {
	slices.SortFunc(kinds, func(a, b KindProgress) int { return cmp.Compare(a.Kind, b.Kind) })
}
