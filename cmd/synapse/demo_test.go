package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// The README's demo must pass on a fresh machine: it is the scene every
// newcomer sees first.
func TestDemo_PlaysTheSceneAndSucceeds(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"demo"}, &out, &errb); code != 0 {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	text := out.String()
	for _, want := range []string{"refused: Task 'api-tests' file scope conflicts with 'api' held by demo/alpha.",
		`"api" is free (release)`, "dead letter", "reads its mailbox", "gets the deferred receipt", "success"} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
}

func TestDemo_JSON(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"demo", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res struct {
		Success bool       `json:"success"`
		Steps   []demoStep `json:"steps"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || !res.Success || len(res.Steps) < 10 {
		t.Fatalf("demo --json: %v %+v", err, res)
	}
}
