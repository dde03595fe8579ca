package edgeplane

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// gitRepo returns the repository root's git command runner, or skips the test when this is not a
// git checkout or git is missing (a source tarball).
func gitRepo(t *testing.T) func(args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	if err := exec.Command("git", "rev-parse", "--git-dir").Run(); err != nil {
		t.Skip("not a git checkout")
	}
	return func(args ...string) (string, error) {
		out, err := exec.Command("git", args...).Output()
		return string(out), err
	}
}

// The quick start leaves a database and its encryption key file in the working directory, and
// make build leaves binaries at the root: git ignores all of them, so a `git add -A` commits
// neither a key nor a build.
func TestGitIgnoresKeysDatabasesAndBuilds(t *testing.T) {
	git := gitRepo(t)
	for _, path := range []string{"edgeplane.db", "edgeplane.db.key", "data/prod.db.key", "data/prod.sqlite.key",
		"edgeplane.db-wal", "edgeplane", "edgeplane-bench", "bin/edgeplane"} {
		if _, err := git("check-ignore", "-q", "--no-index", path); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) && ee.ExitCode() == 1 {
				t.Errorf("git does not ignore %s", path)
				continue
			}
			t.Fatalf("git check-ignore %s: %v", path, err)
		}
	}
	// The commands' sources stay tracked.
	for _, path := range []string{"cmd/edgeplane/main.go", "cmd/edgeplane-bench/main.go"} {
		if _, err := git("check-ignore", "-q", "--no-index", path); err == nil {
			t.Errorf("git ignores %s", path)
		}
	}
}

// No build output is tracked: the largest file of the repository is source or documentation.
func TestNoBinaryTracked(t *testing.T) {
	git := gitRepo(t)
	out, err := git("ls-files", "-s", "--", ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		// "<mode> <object> <stage>\t<path>"
		meta, path, _ := strings.Cut(line, "\t")
		if strings.HasPrefix(meta, "120000") { // a symbolic link
			continue
		}
		if st, err := os.Stat(path); err == nil && st.Size() > 1<<20 {
			t.Errorf("%s is tracked and %d bytes: a build output?", path, st.Size())
		}
		if head, err := readHead(path, 4); err == nil && string(head) == "\x7fELF" {
			t.Errorf("%s is tracked and is an executable binary", path)
		}
	}
}

// readHead returns the first n bytes of the file at path (fewer when it is shorter).
func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	m, err := io.ReadFull(f, b)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil
	}
	return b[:m], err
}

// The Docker build context leaves out databases, key files and local builds, at the root and
// below (a pattern without **/ matches only at the root of the context).
func TestDockerignoreLeavesOutKeysAndBuilds(t *testing.T) {
	f, err := os.Open(".dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	have := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		have[strings.TrimSpace(sc.Text())] = true
	}
	for _, want := range []string{"*.db", "**/*.db", "*.key", "**/*.key", "*.db-wal", "**/*.db-wal", "/edgeplane", "/edgeplane-bench", "/bin/"} {
		if !have[want] {
			t.Errorf(".dockerignore lacks %q", want)
		}
	}
}
