package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is one command of the command line, as the usage text and its help show it.
type command struct {
	// name is the command's words ("apikey create"); synopsis follows them in the usage text.
	name, synopsis string
	// about says what the command does: its help prints it before the flags.
	about string
}

// commands are the commands of the command line, in the order the usage text lists them.
var commands = []command{
	{"serve", "[--listen ADDR] [--db DSN] [--base-url URL] [flags: edgeplane serve -h]",
		"Runs the server on four ports: the API on --listen (127.0.0.1:8080), and the data plane:\n" +
			"agents connect to --agent-listen (127.0.0.1:4443), public HTTP arrives on --http-listen\n" +
			"(127.0.0.1:8081), public HTTPS and TLS on --https-listen (127.0.0.1:8443); --metrics-listen\n" +
			"adds one for /metrics. On an empty database it creates the account \"default\" and prints its\n" +
			"first API key's token once on stderr. Every flag can also come from the environment variable\n" +
			"its help names; the flag wins."},
	{"secrets new-key", "| rotate [--db DSN]", "Prints a new random key for EDGEPLANE_SECRET_KEY."},
	{"secrets rotate", "[--db DSN]",
		"Re-encrypts every secret of the database with the first key of EDGEPLANE_SECRET_KEY=NEW,OLD,\n" +
			"so that the old key can be dropped. Nothing is rewritten when a secret does not decrypt."},
	{"export", "[--db DSN] [--key-file FILE] > backup.json",
		"Writes a backup of the whole database, one JSON document, to stdout, consistent also while\n" +
			"serve runs. Its secrets are encrypted under the database's key (its .key file, or\n" +
			"EDGEPLANE_SECRET_KEY), which the backup does not hold: a restore needs it, and --key-file\n" +
			"writes it to a new file of mode 600, to keep apart from the backup."},
	{"import", "[--db DSN] [--key-file FILE] < backup.json",
		"Restores a backup from stdin into an empty database, all or nothing. The backup's secrets\n" +
			"need the key of the database it came from: --key-file (the file export --key-file wrote,\n" +
			"or the source's .key file), whose keys then decrypt them once and this database's own key\n" +
			"encrypts them again; or EDGEPLANE_SECRET_KEY set to it, for import and serve alike."},
	{"apikey create", "[--db DSN] [--account NAME [--create-account]] [--description TEXT]",
		"Creates an API key with the admin role of an account and prints its token on stdout, once.\n" +
			"It works on an existing database, also while serve runs. An account that does not exist is\n" +
			"refused unless --create-account is given (a new account sees none of the others' objects)."},
	{"ca", "[--db DSN] > edgeplane-ca.pem",
		"Prints edgeplane's CA certificate (PEM) on stdout: agents trust it for the agent listener, and\n" +
			"public clients for the endpoints' certificates. It makes the CA if no server has yet."},
	{"version", "", "Prints edgeplane's version."},
}

// usage is the command line's usage text: every command with its synopsis.
var usage = func() string {
	var b strings.Builder
	b.WriteString("usage:")
	for _, c := range commands {
		if c.name == "secrets rotate" { // shown on the line of secrets new-key
			continue
		}
		fmt.Fprintf(&b, "\n  edgeplane %s", c.name)
		if c.synopsis != "" {
			b.WriteString(" " + c.synopsis)
		}
	}
	b.WriteString("\nRun 'edgeplane COMMAND -h' for what a command does and its flags.")
	return b.String()
}()

// aboutOf is what the command does, for its help.
func aboutOf(name string) string {
	for _, c := range commands {
		if c.name == name {
			return c.about
		}
	}
	return ""
}

// usageError is a mistake in the command line itself: an unknown command, flag or argument. It
// is reported with a pointer to the help that shows what the command takes, and the process exits
// 2, as the flag package and most Unix tools do for a usage mistake, so that a script can tell it
// from a failure of the work itself (exit 1).
type usageError struct {
	// cmd is the command the words were given to ("serve", "apikey"; "" for the top level).
	cmd string
	err error
	// showUsage prints the usage text after the error instead of a one-line pointer to the
	// command's help: for the commands that have no flags of their own to list.
	showUsage bool
}

func (e *usageError) Error() string {
	if e.cmd == "" {
		return "edgeplane: " + e.err.Error()
	}
	return "edgeplane " + e.cmd + ": " + e.err.Error()
}

func (e *usageError) Unwrap() error { return e.err }

// hint is the line printed after the error: where to read what the command takes.
func (e *usageError) hint() string {
	if e.showUsage {
		return usage
	}
	return fmt.Sprintf("Run 'edgeplane %s -h' for what it does and its flags.", e.cmd)
}

// usageErrorf makes the usageError of a command with flags of its own.
func usageErrorf(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// unknownWord is the usageError of a command word that is not one of choices, naming the word
// and the likely one meant.
func unknownWord(cmd, word string, choices []string) error {
	msg := fmt.Sprintf("unknown command %q", word)
	if s := closest(word, choices); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return &usageError{cmd: cmd, err: errors.New(msg), showUsage: true}
}

// exitStatus reports err on stderr, unless it was already reported, and returns the process's
// exit status: 0 for none or a help asked for, 2 for a usage mistake, 1 for any other failure.
func exitStatus(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue *usageError
	isUsage := errors.As(err, &ue)
	switch {
	case errors.Is(err, errReported):
	case isUsage:
		fmt.Fprintf(stderr, "%s\n%s\n", ue.Error(), ue.hint())
	default:
		fmt.Fprintln(stderr, "edgeplane:", err)
	}
	if isUsage {
		return 2
	}
	return 1
}

// newFlags makes the flag set of a subcommand. Asked for help (-h, --help), it prints on stdout
// the usage line, what the command does and its flags, and Parse returns flag.ErrHelp, which
// main treats as success. A mistake prints nothing here: parseFlags turns it into a usageError,
// reported as one line and a pointer to the help, so the error does not scroll away above a
// screenful of flags.
func newFlags(name string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("edgeplane "+name, flag.ContinueOnError)
	out := &flagOutput{}
	fs.SetOutput(out)
	fs.Usage = func() {
		// The flag package writes its error message to the output before it calls Usage, and
		// nothing before the usage it prints for -h.
		if out.wrote {
			return
		}
		flags := 0
		fs.VisitAll(func(*flag.Flag) { flags++ })
		if flags == 0 {
			fmt.Fprintf(stdout, "usage: edgeplane %s\n\n%s\n", name, aboutOf(name))
			return
		}
		fmt.Fprintf(stdout, "usage: edgeplane %s [flags]\n\n%s\n\nflags:\n", name, aboutOf(name))
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(out)
	}
	return fs
}

// flagOutput is where a flag set writes its errors: nowhere, remembering that it was written to
// (parseFlags reports the error Parse returns).
type flagOutput struct{ wrote bool }

func (o *flagOutput) Write(p []byte) (int, error) {
	o.wrote = true
	return len(p), nil
}

// parseFlags parses args with fs and returns a mistake in them as a usageError that names the
// command, the flag, and the flag meant when the one given is a near miss.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	cmd := strings.TrimPrefix(fs.Name(), "edgeplane ")
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if s := closest(name, names); s != "" {
			return usageErrorf(cmd, "unknown flag --%s (did you mean --%s?)", name, s)
		}
		return usageErrorf(cmd, "unknown flag --%s", name)
	}
	return &usageError{cmd: cmd, err: err}
}

// noArgs refuses the arguments left after the flags of a command that takes none.
func noArgs(fs *flag.FlagSet, why string) error {
	if fs.NArg() == 0 {
		return nil
	}
	cmd := strings.TrimPrefix(fs.Name(), "edgeplane ")
	if why != "" {
		why = "; " + why
	}
	return usageErrorf(cmd, "unexpected arguments %q: it takes none%s", fs.Args(), why)
}

// isHelp reports whether arg asks for help rather than naming a subcommand.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--h", "--help", "help":
		return true
	}
	return false
}

// closest returns the choice nearest to word, when it is near enough to be a misspelling of it
// (at most two edits, and fewer than half the word's letters), or "".
func closest(word string, choices []string) string {
	best, bestD := "", 3
	for _, c := range choices {
		if d := editDistance(word, c); d < bestD && 2*d < len(word) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes (flag and command names
// are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
