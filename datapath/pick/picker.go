package pick

// Name is a picker's typed name: the tier label of metrics and of the
// routing explanation ("tier1_prefix", "tier1_5_kv_exact", …).
type Name string

// Picker chooses one of a snapshot of candidates, or falls through with a
// reason the caller records. It is the seam every list-based choice goes
// through (the P/D ladder's tiers, KV-exact on a single pool): one method,
// as Caddy's Selector, with the typed name llm-d gives its plugins. cands is
// never empty, and the runner, not the picker, enforces that only one of
// cands is ever chosen.
type Picker interface {
	Name() Name
	Pick(f *Facts, cands []Candidate) (idx int, reason string, ok bool)
}

// DryPicker is a Picker whose Pick has side effects (metrics, watchdogs);
// a dry run (the routing explanation) calls DryPick instead so explaining a
// request never moves a counter. Same contract as Pick.
type DryPicker interface {
	DryPick(f *Facts, cands []Candidate) (idx int, reason string, ok bool)
}

// Observer is told which candidate a request finally went to, whichever
// picker chose it, so a picker can learn (prefix ownership, KV staleness).
type Observer interface {
	Observe(f *Facts, chosen Candidate)
}

// Step is one picker's outcome for one request.
type Step struct {
	Tier   string
	Hit    bool
	Reason string // fall-through reason when !Hit
	Choice string // endpoint ID when Hit
}

// ReasonNotChosen is the fall-through a runner records when a picker
// returned an index outside the candidates it was given.
const ReasonNotChosen = "tier_returned_non_candidate"

// First runs pickers in order over cands and returns the index of the first
// one's choice, appending one Step per picker that ran. dry makes every
// DryPicker run DryPick. It enforces the invariant of the seam: a choice
// outside cands is a fall-through, never a pick. ok is false when every
// picker fell through.
func First(f *Facts, cands []Candidate, dry bool, steps *[]Step, pickers ...Picker) (int, bool) {
	for _, p := range pickers {
		choose := p.Pick
		if d, isDry := p.(DryPicker); isDry && dry {
			choose = d.DryPick
		}
		idx, reason, ok := choose(f, cands)
		if ok && (idx < 0 || idx >= len(cands)) {
			ok, reason = false, ReasonNotChosen
		}
		if !ok {
			*steps = append(*steps, Step{Tier: string(p.Name()), Reason: reason})
			continue
		}
		*steps = append(*steps, Step{Tier: string(p.Name()), Hit: true, Choice: cands[idx].ID})
		return idx, true
	}
	return -1, false
}
