package journal

import (
	"strconv"
	"unicode/utf8"
)

// scanClaim is decodeClaim's fast path: it fills p from a claim dict the
// way json.Unmarshal would, for the form the encoder writes (a flat object
// of our keys whose values are plain strings, numbers, null, arrays of
// plain strings, and "git": null), about five times faster than
// encoding/json. A claim record is decoded on every replay, on every hub
// that follows the fleet's changes (a dashboard open), and by every fleet
// read after a change. Anything else — an escape in a string, an unknown
// or differently cased key, a nested object, a number an integer field
// cannot take, bytes after the object — returns false, and the caller
// decodes with encoding/json, whose result (or error) is the definition:
// FuzzScanClaim holds the two to the same answer.
func scanClaim(payload []byte, p *claimJSON) bool {
	s := claimScanner{b: payload, s: string(payload)}
	s.space()
	if !s.eat('{') {
		return false
	}
	var st claimStore // one allocation for every scalar field's value
	s.space()
	if s.eat('}') {
		return s.end()
	}
	for {
		s.space()
		key, ok := s.str()
		if !ok {
			return false
		}
		s.space()
		if !s.eat(':') {
			return false
		}
		s.space()
		switch key {
		case "task_id":
			ok = s.strField(&p.TaskID, &st.s[0])
		case "owner":
			ok = s.strField(&p.Owner, &st.s[1])
		case "note":
			ok = s.strField(&p.Note, &st.s[2])
		case "status":
			ok = s.strField(&p.Status, &st.s[3])
		case "data_ref":
			ok = s.strField(&p.DataRef, &st.s[4])
		case "worktree":
			ok = s.strField(&p.Worktree, &st.s[5])
		case "mode":
			ok = s.strField(&p.Mode, &st.s[6])
		case "checkpoint":
			ok = s.strField(&p.Checkpoint, &st.s[7])
		case "quota_principal":
			ok = s.strField(&p.QuotaPrincipal, &st.s[8])
		case "board_task":
			ok = s.strField(&p.BoardTask, &st.s[9])
		case "claimed_at":
			ok = s.floatField(&p.ClaimedAt, &st.f[0])
		case "lease_expires_at":
			ok = s.floatField(&p.ExpiresAt, &st.f[1])
		case "epoch":
			ok = s.intField(&p.Epoch, &st.i[0])
		case "version":
			ok = s.intField(&p.Version, &st.i[1])
		case "paths":
			ok = s.strsField(&p.Paths)
		case "globs":
			ok = s.strsField(&p.Globs)
		case "files":
			ok = s.strsField(&p.Files)
		case "git":
			ok = s.null()
			p.Git = nil
		default: // path_identity (an object), or a key encoding/json may fold
			return false
		}
		if !ok {
			return false
		}
		s.space()
		if s.eat('}') {
			return s.end()
		}
		if !s.eat(',') {
			return false
		}
	}
}

// claimStore holds the values scanClaim's pointers point at.
type claimStore struct {
	s [10]string
	f [2]float64
	i [2]int64
}

type claimScanner struct {
	b []byte
	s string // b as one string: the values are its substrings
	i int
}

func (s *claimScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *claimScanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end says whether only whitespace follows the object.
func (s *claimScanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// null reads the literal null.
func (s *claimScanner) null() bool {
	if len(s.b)-s.i >= 4 && s.s[s.i:s.i+4] == "null" {
		s.i += 4
		return true
	}
	return false
}

// str reads a string without escapes, control bytes or invalid UTF-8
// (encoding/json would unescape, refuse, or replace those).
func (s *claimScanner) str() (string, bool) {
	if !s.eat('"') {
		return "", false
	}
	start, ascii := s.i, true
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			v := s.s[start:s.i]
			s.i++
			return v, ascii || utf8.ValidString(v)
		case c == '\\' || c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

func (s *claimScanner) strField(dst **string, store *string) bool {
	if s.null() {
		*dst = nil
		return true
	}
	v, ok := s.str()
	*store, *dst = v, store
	return ok
}

// number reads a JSON number literal (the grammar encoding/json accepts).
func (s *claimScanner) number() (string, bool) {
	start := s.i
	s.eat('-')
	switch {
	case s.eat('0'):
	case s.i < len(s.b) && s.b[s.i] >= '1' && s.b[s.i] <= '9':
		s.digits()
	default:
		return "", false
	}
	if s.eat('.') && !s.digits() {
		return "", false
	}
	if s.eat('e') || s.eat('E') {
		if !s.eat('+') {
			s.eat('-')
		}
		if !s.digits() {
			return "", false
		}
	}
	return s.s[start:s.i], true
}

// digits reads one or more digits.
func (s *claimScanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *claimScanner) floatField(dst **float64, store *float64) bool {
	if s.null() {
		*dst = nil
		return true
	}
	lit, ok := s.number()
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(lit, 64)
	*store, *dst = f, store
	return err == nil
}

func (s *claimScanner) intField(dst **int64, store *int64) bool {
	if s.null() {
		*dst = nil
		return true
	}
	lit, ok := s.number()
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	*store, *dst = n, store
	return err == nil
}

// strsField reads null or an array of strings (a null element is left to
// encoding/json).
func (s *claimScanner) strsField(dst *[]*string) bool {
	if s.null() {
		*dst = nil
		return true
	}
	if !s.eat('[') {
		return false
	}
	var vals []string
	s.space()
	if !s.eat(']') {
		for {
			s.space()
			v, ok := s.str()
			if !ok {
				return false
			}
			vals = append(vals, v)
			s.space()
			if s.eat(']') {
				break
			}
			if !s.eat(',') {
				return false
			}
		}
	}
	out := make([]*string, len(vals)) // [] is empty, not nil: as encoding/json leaves it
	for i := range vals {
		out[i] = &vals[i]
	}
	*dst = out
	return true
}
