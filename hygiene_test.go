package edgeplane

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
		"edgeplane.db-wal", "edgeplane", "edgeplane-bench", "bin/edgeplane",
		"cmd/edgeplane/edgeplane", "cmd/edgeplane-bench/edgeplane-bench"} {
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
	for _, want := range []string{"*.db", "**/*.db", "*.key", "**/*.key", "*.db-wal", "**/*.db-wal", "/edgeplane", "/edgeplane-bench", "/bin/",
		"/cmd/edgeplane/edgeplane", "/cmd/edgeplane-bench/edgeplane-bench", "/agent/"} {
		if !have[want] {
			t.Errorf(".dockerignore lacks %q", want)
		}
	}
}

// docFiles are the repository's documents: README.md, docs/*.md, and the notes beside the
// deployment examples and the benchmarks' results.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	for _, pattern := range []string{"docs/*.md", "deploy/*.md", "bench/*.md"} {
		matched, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, matched...)
	}
	return files
}

var (
	mdLinkRE    = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	mdHeadingRE = regexp.MustCompile(`^#{1,6} +(.+?) *#*$`)
	slugDropRE  = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// isFence reports whether a Markdown line opens or closes fenced code, at the margin or indented
// inside a list item.
func isFence(line string) bool { return strings.HasPrefix(strings.TrimLeft(line, " "), "```") }

// mdAnchors returns the anchors of a Markdown file's headings as GitHub makes them: lower case,
// punctuation dropped, spaces as hyphens, and -1, -2, … for repeats. Fenced code is skipped.
func mdAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors, seen := map[string]bool{}, map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if isFence(line) {
			fenced = !fenced
			continue
		}
		m := mdHeadingRE.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		slug := strings.ReplaceAll(slugDropRE.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// Every relative link of the README and the docs resolves to a file of the repository and, where
// it names an anchor, to a heading of that file: a reader of a clone follows every link, and none
// leads outside the repository (to notes that are not in it).
func TestDocLinksResolve(t *testing.T) {
	// The folder of design notes beside the repository, spelled in two pieces so that this file
	// does not itself point there.
	outsideNotes := ".." + "/" + "shared"
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, doc := range docFiles(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), outsideNotes) {
			t.Errorf("%s refers to %s, which is not in the repository", doc, outsideNotes)
		}
		fenced := false
		for i, line := range strings.Split(string(data), "\n") {
			if isFence(line) {
				fenced = !fenced
			}
			if fenced {
				continue
			}
			for _, m := range mdLinkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, anchor, _ := strings.Cut(target, "#")
				path := doc
				if file != "" {
					path = filepath.Join(filepath.Dir(doc), file)
				}
				abs, _ := filepath.Abs(path)
				if rel, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s:%d: %s leads outside the repository", doc, i+1, target)
					continue
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: %s: no such file", doc, i+1, target)
					continue
				}
				if anchor != "" && (!strings.HasSuffix(path, ".md") || !mdAnchors(t, path)[anchor]) {
					t.Errorf("%s:%d: %s: %s has no heading with the anchor #%s", doc, i+1, target, path, anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d links: does the link pattern still match the documents?", checked)
	}
}

// issueRE finds a citation of an issue tracker's number: the word issue and a number.
var issueRE = regexp.MustCompile(`(?i)\bissues? #?\d+`)

// The README is a newcomer's first hour: at most 300 lines, the details in docs/. The documents
// point readers at nothing they do not have: no issue numbers of a tracker outside the repository.
func TestDocsAreSelfContained(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > 300 {
		t.Errorf("README.md has %d lines; keep it to 300 and move details to docs/", n)
	}
	for _, doc := range docFiles(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			if m := issueRE.FindString(line); m != "" {
				t.Errorf("%s:%d: %q cites a tracker readers of the repository do not have; say what and why instead", doc, i+1, m)
			}
		}
	}
}

// Comments in the Go sources give reasons, not numbers of a tracker outside the repository.
func TestCommentsCiteNoTracker(t *testing.T) {
	git := gitRepo(t)
	out, err := git("ls-files", "--", "*.go")
	if err != nil {
		t.Fatal(err)
	}
	files := strings.Fields(out)
	if len(files) < 100 {
		t.Fatalf("only %d Go files listed: does the listing still work?", len(files))
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			_, comment, ok := strings.Cut(line, "//")
			if !ok {
				continue
			}
			if m := issueRE.FindString(comment); m != "" {
				t.Errorf("%s:%d: %q cites a tracker readers of the repository do not have; give the reason instead", path, i+1, m)
			}
		}
	}
}
