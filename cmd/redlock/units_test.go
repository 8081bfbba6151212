package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestCheckUnits(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Duration("ttl", time.Second, "")
	fs.String("label", "", "")
	fs.Bool("skip-ok", false, "")
	tests := []struct {
		args string
		want string // "" for no error
	}{
		{"--ttl 5", `--ttl 5 has no unit: add one, e.g. "5s"`},
		{"-ttl=5", `--ttl 5 has no unit`},
		{"--skip-ok --ttl 1.5", `--ttl 1.5 has no unit: add one, e.g. "1.5s"`},
		{"--ttl 0", ""},     // 0 needs no unit
		{"--ttl 5s", ""},    // fine
		{"--ttl abc", ""},   // left to flag's own error
		{"--label 5 k", ""}, // not a duration
		{"-- --ttl 5", ""},  // the command's arguments
		{"k --ttl 5s", ""},  // a positional argument first
		{"--ttl", ""},       // left to flag ("needs an argument")
		{"--bogus 5", ""},   // left to flag ("not defined")
	}
	for _, tt := range tests {
		err := checkUnits(fs, strings.Fields(tt.args))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%q: %v, want nil", tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%q: %v, want %q", tt.args, err, tt.want)
		}
	}
}
