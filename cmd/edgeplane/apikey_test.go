package main

import (
	"strings"
	"testing"
)

// apikey create refuses an account that does not exist, naming it and the account meant, and
// creates nothing: a misspelled --account used to make a new, empty account whose key saw
// nothing. With --create-account it creates the account and says so on stderr; the new account's
// key sees only its own objects.
func TestAPIKeyCreateUnknownAccount(t *testing.T) {
	t.Parallel()
	p, def := serverToken(t)
	for range 2 { // the second try is refused too: the first created nothing
		stdout, stderr, code := runBin(t, nil, "apikey", "create", "--db", p.db, "--account", "defualt")
		for _, want := range []string{`account "defualt" does not exist; nothing was created (did you mean "default"?)`,
			"Accounts: default.", "add --create-account"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
		if code != 1 || stdout != "" {
			t.Fatalf("exit %d, stdout %q; want exit 1 and no token", code, stdout)
		}
	}
	if n := len(listKeys(t, p, def).Keys); n != 1 {
		t.Errorf("the default account has %d keys, want its first only", n)
	}

	// An account that exists needs no flag, and nothing is said about it.
	stdout, stderr, code := runBin(t, nil, "apikey", "create", "--db", p.db, "--account", "default")
	if code != 0 || stderr != "" || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("--account default: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	// Asked to, it creates the account and says so; once it exists, the flag changes nothing.
	stdout, stderr, code = runBin(t, nil, "apikey", "create", "--db", p.db, "--account", "team-b", "--create-account")
	if code != 0 || stderr != "edgeplane: created account \"team-b\" with its admin user; it sees none of the other accounts' objects\n" {
		t.Fatalf("--create-account: exit %d, stderr %q", code, stderr)
	}
	teamB := strings.TrimSpace(stdout)
	again, stderr, code := runBin(t, nil, "apikey", "create", "--db", p.db, "--account", "team-b", "--create-account")
	if code != 0 || stderr != "" || again == stdout {
		t.Fatalf("--create-account for an account that exists: exit %d, stderr %q", code, stderr)
	}
	if n := len(listKeys(t, p, teamB).Keys); n != 2 {
		t.Errorf("team-b lists %d keys, want its own 2", n)
	}
	policy := createIPPolicy(t, p, def)
	if status, errCode := getIPPolicy(t, p, teamB, policy); status != 404 || errCode != "ERR_NGROK_404" {
		t.Errorf("team-b reads the default account's policy: %d %s", status, errCode)
	}
}
