package coord

import (
	"strings"
	"unicode"
)

// strip trims like Python's str.strip(), which the reference applies to ids,
// notes and paths: Unicode white space plus the separators \x1c-\x1f.
func strip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
	})
}

// printable is Python's str.isprintable(): no character of the C* or Z*
// categories except the ASCII space.
func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
