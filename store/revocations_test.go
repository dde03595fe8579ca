package store_test

import (
	"context"
	"testing"
	"time"
)

// Revocations of sessions on every engine: read back since a time, the later times kept when a
// subject is revoked again, expired ones not read, scopes apart.
func TestSessionRevocations(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		s := open(t, dsn)
		ctx := context.Background()
		now := time.Now().Truncate(time.Second)
		read := func(since time.Time) map[string][2]time.Time {
			t.Helper()
			out := map[string][2]time.Time{}
			if err := s.SessionRevocations(ctx, since, time.Now(), func(scope, subject string, at, until time.Time) {
				out[scope+"/"+subject] = [2]time.Time{at, until}
			}); err != nil {
				t.Fatal(err)
			}
			return out
		}
		for _, r := range []struct {
			scope, subject string
			at, until      time.Time
		}{
			{"saml-logout:rt_a", "alice", now.Add(-time.Hour), now.Add(time.Hour)},
			{"saml-logout:rt_b", "alice", now, now.Add(time.Hour)},
			{"saml-logout:rt_a", "gone", now.Add(-2 * time.Hour), now.Add(-time.Minute)},
		} {
			if err := s.RevokeSessions(ctx, r.scope, r.subject, r.at, r.until); err != nil {
				t.Fatal(err)
			}
		}
		all := read(time.Time{})
		if len(all) != 2 || !all["saml-logout:rt_a/alice"][0].Equal(now.Add(-time.Hour)) || !all["saml-logout:rt_b/alice"][0].Equal(now) {
			t.Fatalf("all revocations: %v", all)
		}
		if recent := read(now.Add(-time.Minute)); len(recent) != 1 || recent["saml-logout:rt_b/alice"] == ([2]time.Time{}) {
			t.Fatalf("revocations of the last minute: %v", recent)
		}
		// Again with an earlier time: the later one stays; with a later one: it moves.
		if err := s.RevokeSessions(ctx, "saml-logout:rt_b", "alice", now.Add(-time.Hour), now.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if got := read(time.Time{})["saml-logout:rt_b/alice"]; !got[0].Equal(now) || got[1].Before(now.Add(time.Hour)) {
			t.Fatalf("after an earlier revocation: %v", got)
		}
		if err := s.RevokeSessions(ctx, "saml-logout:rt_a", "alice", now.Add(time.Second), now.Add(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
		if got := read(now)["saml-logout:rt_a/alice"]; !got[0].Equal(now.Add(time.Second)) || got[1].Before(now.Add(2*time.Hour)) {
			t.Fatalf("after a later revocation: %v", got)
		}
	})
}
