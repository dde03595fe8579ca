package main

// What a newcomer's mistakes on the command line get back: the error and the word or flag at
// fault, where the help is, and exit status 2; and what each command's help says.

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// A mistake in the command line exits 2 with the error on stderr's first line, naming the word
// or flag at fault (and the one meant, for a near miss). A command with flags of its own adds one
// line saying where its help is, instead of a screenful of flags that would scroll the error
// away; a wrong command word is followed by the short list of commands. Nothing goes to stdout.
func TestUsageMistakes(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "x.db")
	for _, c := range []struct {
		args  []string
		first string // stderr's first line
		hint  string // the next line ("" for the usage text)
	}{
		{[]string{"serve", "--lisen", "127.0.0.1:0"}, "edgeplane serve: unknown flag --lisen (did you mean --listen?)", "Run 'edgeplane serve -h' for what it does and its flags."},
		{[]string{"serve", "--agent-listn", ""}, "edgeplane serve: unknown flag --agent-listn (did you mean --agent-listen?)", "Run 'edgeplane serve -h' for what it does and its flags."},
		{[]string{"serve", "--nope"}, "edgeplane serve: unknown flag --nope", "Run 'edgeplane serve -h' for what it does and its flags."},
		{[]string{"serve", "--db", db, "now"}, `edgeplane serve: unexpected arguments ["now"]: it takes none`, "Run 'edgeplane serve -h' for what it does and its flags."},
		{[]string{"serve", "--max-connections", "lots"}, `edgeplane serve: invalid value "lots" for flag -max-connections: parse error`, "Run 'edgeplane serve -h' for what it does and its flags."},
		{[]string{"version", "--foo"}, "edgeplane version: unknown flag --foo", "Run 'edgeplane version -h' for what it does and its flags."},
		{[]string{"--version", "now"}, `edgeplane version: unexpected arguments ["now"]: it takes none`, "Run 'edgeplane version -h' for what it does and its flags."},
		{[]string{"export", "--db"}, "edgeplane export: flag needs an argument: -db", "Run 'edgeplane export -h' for what it does and its flags."},
		{[]string{"export", "--db", db, "backup.json"}, `edgeplane export: unexpected arguments ["backup.json"]: it takes none; redirect stdout to a file`, "Run 'edgeplane export -h' for what it does and its flags."},
		{[]string{"import", "--key", "k"}, "edgeplane import: unknown flag --key", "Run 'edgeplane import -h' for what it does and its flags."},
		{[]string{"apikey", "create", "--acount", "b"}, "edgeplane apikey create: unknown flag --acount (did you mean --account?)", "Run 'edgeplane apikey create -h' for what it does and its flags."},
		{[]string{"apikey", "create", "--db", db, "team-b"}, `edgeplane apikey create: unexpected arguments ["team-b"]: it takes none (did you mean --account team-b?)`, "Run 'edgeplane apikey create -h' for what it does and its flags."},
		{[]string{"secrets", "new-key", "x"}, `edgeplane secrets new-key: unexpected arguments ["x"]: it takes none`, "Run 'edgeplane secrets new-key -h' for what it does and its flags."},
		{[]string{"ca", "--d", db}, "edgeplane ca: unknown flag --d", "Run 'edgeplane ca -h' for what it does and its flags."},
		{[]string{"apikey", "creat"}, `edgeplane apikey: unknown command "creat" (did you mean "create"?)`, ""},
		{[]string{"apikey"}, "edgeplane apikey: missing its command: apikey create", ""},
		{[]string{"secrets", "rotat"}, `edgeplane secrets: unknown command "rotat" (did you mean "rotate"?)`, ""},
		{[]string{"servr"}, `edgeplane: unknown command "servr" (did you mean "serve"?)`, ""},
		{[]string{"frobnicate"}, `edgeplane: unknown command "frobnicate"`, ""},
		{nil, "edgeplane: no command given", ""},
	} {
		stdout, stderr, code := runBin(t, nil, c.args...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if code != 2 || stdout != "" || lines[0] != c.first {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and first line %q", c.args, code, stdout, stderr, c.first)
			continue
		}
		if c.hint != "" && (len(lines) != 2 || lines[1] != c.hint) {
			t.Errorf("%q: stderr is not the error and the line %q:\n%s", c.args, c.hint, stderr)
		}
		if c.hint == "" && (len(lines) < 3 || lines[1] != "usage:" || len(lines) > 12) {
			t.Errorf("%q: stderr is not the error and the short usage:\n%s", c.args, stderr)
		}
	}

	// With JSON logs, serve's usage mistake is a JSON record like any error that stops it, and
	// still exits 2.
	_, stderr, code := runBin(t, nil, "serve", "--log-format", "json", "--lisen", "x")
	var rec map[string]any
	if err := json.Unmarshal([]byte(stderr), &rec); err != nil || code != 2 ||
		rec["err"] != "edgeplane serve: unknown flag --lisen (did you mean --listen?)" {
		t.Errorf("serve --log-format json --lisen: exit %d, stderr %q, want exit 2 and one JSON record", code, stderr)
	}
}

// Every command's help says what the command does before its flags: the usage line, then a
// paragraph, then the flags. serve's names its four ports with their flags and defaults.
func TestHelpSaysWhatTheCommandDoes(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		args := append(strings.Fields(c.name), "-h")
		stdout, stderr, code := runBin(t, nil, args...)
		if code != 0 || stderr != "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr)
			continue
		}
		paras := strings.Split(stdout, "\n\n")
		if len(paras) < 2 || !strings.HasPrefix(paras[0], "usage: edgeplane "+c.name) || len(strings.Fields(paras[1])) < 3 ||
			strings.HasPrefix(paras[1], "flags:") || strings.HasPrefix(strings.TrimSpace(paras[1]), "-") {
			t.Errorf("%q: the help does not say what the command does before its flags:\n%s", args, stdout)
		}
	}
	stdout, _, _ := runBin(t, nil, "help", "serve") // "help serve" is "serve -h"
	about, _, _ := strings.Cut(stdout, "flags:")
	for _, want := range []string{"--listen (127.0.0.1:8080)", "--agent-listen (127.0.0.1:4443)", "--http-listen\n(127.0.0.1:8081)",
		"--https-listen (127.0.0.1:8443)", "--metrics-listen"} {
		if !strings.Contains(about, want) {
			t.Errorf("serve's help does not name %q before its flags:\n%s", want, about)
		}
	}
}

// A port that is taken stops serve with an error naming the flag of that port, for each of its
// listeners, and exit 1 (the command line was right; the machine refused).
func TestBusyPortNamesItsFlag(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	free := []string{"--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--https-listen", "127.0.0.1:0"}
	for _, flagName := range []string{"--listen", "--agent-listen", "--http-listen", "--https-listen", "--metrics-listen"} {
		args := append([]string{"serve", "--db", filepath.Join(t.TempDir(), "x.db")}, free...)
		args = append(args, flagName, addr) // the last one given wins
		_, stderr, code := runBin(t, nil, args...)
		if code != 1 || !strings.HasPrefix(stderr, "edgeplane: "+flagName+": listen tcp "+addr) || !strings.Contains(stderr, "address already in use") {
			t.Errorf("%s on a busy port: exit %d, stderr %q; want exit 1 and the error naming %s", flagName, code, stderr, flagName)
		}
	}
}

// closest proposes the name meant for a near miss only.
func TestClosest(t *testing.T) {
	choices := []string{"listen", "agent-listen", "db", "create", "default"}
	for _, c := range []struct{ word, want string }{
		{"lisen", "listen"}, {"listne", "listen"}, {"agent-listn", "agent-listen"}, {"creat", "create"},
		{"defualt", "default"}, {"d", ""}, {"dbx", "db"}, {"nope", ""}, {"x", ""}, {"", ""},
	} {
		if got := closest(c.word, choices); got != c.want {
			t.Errorf("closest(%q) = %q, want %q", c.word, got, c.want)
		}
	}
}
