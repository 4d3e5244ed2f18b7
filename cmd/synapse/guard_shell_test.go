package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The files a shell command names as write targets, and what the guard
// owns up to not knowing.
func TestScanShell_WriteTargetsAndCannotTell(t *testing.T) {
	cwd := t.TempDir()
	os.MkdirAll(filepath.Join(cwd, "dst"), 0o755)
	os.WriteFile(filepath.Join(cwd, "g1.go"), nil, 0o644)
	os.WriteFile(filepath.Join(cwd, "g2.go"), nil, 0o644)
	for _, tc := range []struct {
		cmd     string
		targets []string // relative to cwd
		unsure  string   // a substring of what it cannot tell; "" = nothing
	}{
		{"ls -la && go test ./...", nil, ""},
		{"echo hi > out.txt", []string{"out.txt"}, ""},
		{"echo hi >>log.txt 2>err.txt", []string{"log.txt", "err.txt"}, ""},
		{"make 2>&1 | tee -a build.log", []string{"build.log"}, ""},
		{"cmd &> all.log; cmd >| clob.txt", []string{"all.log", "clob.txt"}, ""},
		{"echo x >&2", nil, ""},
		{"sed -i 's/a/b/' a.go b.go", []string{"a.go", "b.go"}, ""},
		{"sed -i.bak -e 's/a/b/' c.go", []string{"c.go"}, ""},
		{"sed 's/a/b/' a.go > a2.go", []string{"a2.go"}, ""},
		{"perl -pi -e 's/a/b/' p.txt", []string{"p.txt"}, ""},
		{"mv old.go new.go", []string{"old.go", "new.go"}, ""},
		{"cp a.go dst", []string{"dst", "dst/a.go"}, ""},
		{"cp -r a b -t dst2", []string{"dst2"}, ""},
		{"rm -rf build tmp.txt", []string{"build", "tmp.txt"}, ""},
		{"touch -d now t.txt", []string{"t.txt"}, ""},
		{"git checkout -- x.go y.go", []string{"x.go", "y.go"}, ""},
		{"git checkout main -- z.go", []string{"z.go"}, ""},
		{"git restore --source HEAD~1 r.go", []string{"r.go"}, ""},
		{"git -C sub rm gone.go", []string{"sub/gone.go"}, ""},
		{"git status && git diff", nil, ""},
		{"cd sub && echo > in-sub.txt", []string{"sub/in-sub.txt"}, ""},
		{`bash -lc "echo x > inner.txt"`, []string{"inner.txt"}, ""},
		{"FOO=1 sudo -E tee q.txt < /dev/null", []string{"q.txt"}, ""},
		{"dd if=/dev/zero of=zero.bin bs=1 count=1", []string{"zero.bin"}, ""},
		{"cat > h.txt <<'EOF'\nline > not-a-target\nEOF\necho ok", []string{"h.txt"}, ""},
		{"apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: added.go\n+x\n*** End Patch\nEOF", []string{"added.go"}, ""},
		{"rm *.go", []string{"g1.go", "g2.go"}, ""},
		{"echo '# not a comment' > 'quoted name.txt' # a comment > nope", []string{"quoted name.txt"}, ""},
		{`echo x > "$OUT"`, nil, "computed at run time"},
		{"echo x > $(mktemp)", nil, "substitutes the output of a command"},
		{"eval \"$CMD\"", nil, "builds at run time"},
		{"find . -name '*.orig' -delete", nil, "find -delete"},
		{"ls | xargs rm", nil, "builds at run time"},
		{"git checkout feature", nil, "switch branches"},
		{"git reset --hard HEAD", nil, "git reset --hard"},
		{`python3 -c "open('x','w')"`, nil, "inline python3 script"},
		{"echo 'unbalanced > x", nil, "unbalanced"},
		{"cd $DIR && echo > rel.txt", nil, "relative to a folder computed"},
		{"diff <(ls a) <(ls b)", nil, "process substitution"},
		{"sh -c 'sh -c \"sh -c \\\"sh -c \\\\\\\"sh -c x\\\\\\\"\\\"\"'", nil, "nests shells more than 4 deep"},
	} {
		s := scanShell(tc.cmd, cwd)
		var want []string
		for _, p := range tc.targets {
			want = append(want, filepath.Join(cwd, p))
		}
		if !slices.Equal(s.targets, want) {
			t.Errorf("%q: targets %v, want %v", tc.cmd, s.targets, want)
		}
		got := strings.Join(s.unsure, "; ")
		if tc.unsure == "" && got != "" || !strings.Contains(got, tc.unsure) {
			t.Errorf("%q: cannot tell %q, want %q", tc.cmd, got, tc.unsure)
		}
	}
}

// The file list of a Codex patch, and a patch that cannot be read.
func TestPatchFiles_CodexFormat(t *testing.T) {
	files, err := patchFiles("*** Begin Patch\n*** Add File: a/new.go\n+package a\n*** Delete File: old.go\n*** Update File: b.go\n*** Move to: c.go\n@@ func f()\n-x\n+y\n*** End Patch")
	if err != nil || !slices.Equal(files, []string{"a/new.go", "old.go", "b.go", "c.go"}) {
		t.Fatalf("files %v, %v", files, err)
	}
	if files, err := patchFiles("<<'EOF'\n*** Begin Patch\n*** Update File: w.go\n@@\n-a\n+b\n*** End Patch\nEOF"); err != nil || !slices.Equal(files, []string{"w.go"}) {
		t.Fatalf("here-document wrapped: %v, %v", files, err)
	}
	for _, bad := range []string{"", "diff --git a/x b/x", "*** Begin Patch\n*** Update File: x.go\n", "*** Begin Patch\n*** End Patch", "*** Begin Patch\n*** Add File: \n*** End Patch"} {
		if _, err := patchFiles(bad); !errors.Is(err, errPatchUnreadable) {
			t.Errorf("%q: err %v, want errPatchUnreadable", bad, err)
		}
	}
}
