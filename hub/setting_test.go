package hub

import "testing"

// A Setting left alone is the default, Set is its value, Off and Set(0)
// are off: the three states the old 0-versus-−1 convention spelled with
// magic numbers.
func TestSetting_DefaultSetOff(t *testing.T) {
	var def Setting[float64]
	for _, tc := range []struct {
		s    Setting[float64]
		want float64
		str  string
	}{
		{def, 5, "default"}, {Set(2.5), 2.5, "2.5"}, {Off[float64](), 0, "off"}, {Set(0.0), 0, "off"}, {Set(-1.0), 0, "off"},
	} {
		if got := tc.s.or(5); got != tc.want || tc.s.String() != tc.str {
			t.Errorf("%v: or(5) = %v, String %q; want %v, %q", tc.s, got, tc.s.String(), tc.want, tc.str)
		}
	}
	if got := Set(3).or(7); got != 3 {
		t.Errorf("Set(3).or(7) = %d", got)
	}
}
