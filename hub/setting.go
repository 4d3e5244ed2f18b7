package hub

import "strconv"

// Setting is a Config number with three states no reader can confuse: the
// zero Setting leaves it to the hub's default, Set(v) sets it, Off() turns
// its mechanism off. Set(v) with v ≤ 0 is Off too, as the flags say
// ("0 = off"). withDefaults resolves every Setting to a plain number, 0
// meaning off, before anything reads it.
type Setting[T int | float64] struct {
	v     T
	given bool
}

// Set is the setting v (off when v ≤ 0).
func Set[T int | float64](v T) Setting[T] { return Setting[T]{v: max(v, 0), given: true} }

// Off turns the setting's mechanism off.
func Off[T int | float64]() Setting[T] { return Setting[T]{given: true} }

// or is the setting's value, def when it was left to the default; 0 is off.
func (s Setting[T]) or(def T) T {
	if !s.given {
		return def
	}
	return s.v
}

// String is "default", "off" or the value.
func (s Setting[T]) String() string {
	switch {
	case !s.given:
		return "default"
	case s.v == 0:
		return "off"
	}
	return strconv.FormatFloat(float64(s.v), 'g', -1, 64)
}
