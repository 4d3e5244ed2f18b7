package journal

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Each disk fault the journal types (INV-JA-2) gets its own cause and what
// to do, found through wrapping.
func TestAdvice_EachFaultSaysWhatToDo_INV_JA_2(t *testing.T) {
	for err, want := range map[error]string{
		ErrDiskFull: "free space", ErrReadOnly: "writable", ErrDamaged: "synapse journal check /j.db", errors.New("x"): "see the hub's log",
	} {
		_, todo := Advice("/j.db", fmt.Errorf("append: %w", err))
		if !strings.Contains(todo, want) {
			t.Errorf("%v: %q does not say %q", err, todo, want)
		}
	}
}
