package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// --durability and EDGEPLANE_DURABILITY accept normal and full and refuse anything else before
// the database is touched.
func TestDurabilityValues(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flag", nil, []string{"--durability", "always"}},
		{"env", []string{"EDGEPLANE_DURABILITY=sometimes"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "edgeplane.db")
			args := append([]string{"serve", "--db", db, "--listen", "127.0.0.1:0"}, c.args...)
			_, stderr, code := runBin(t, c.env, args...)
			if code == 0 || !strings.Contains(stderr, "durability must be normal or full") {
				t.Fatalf("exit %d; stderr:\n%s", code, stderr)
			}
		})
	}
}

// Under --durability full (group commit), concurrent creates are all acknowledged, and every
// acknowledged one is there after the process is killed and started again. (What a power loss
// would keep cannot be tested here; the crash of the process can.)
func TestDurabilityFullKeepsAcknowledgedCreates(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "edgeplane.db")
	p := startServe(t, "", []string{"EDGEPLANE_DURABILITY=full"}, "--db", db, "--listen", "127.0.0.1:0")
	token, ok := bootstrapToken(t, p.Stderr.String())
	if !ok {
		t.Fatalf("no bootstrap token; stderr:\n%s", p.Stderr)
	}
	const writers, each = 8, 10
	var (
		mu  sync.Mutex
		ids []string
		wg  sync.WaitGroup
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// Not call(): it stops the test with t.Fatal, which only the test's goroutine may.
				req, err := http.NewRequest("POST", p.url("/ip_policies"), strings.NewReader(fmt.Sprintf(`{"description":"w%d-%d"}`, w, i)))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Ngrok-Version", "2")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				var doc struct{ ID string }
				err = json.NewDecoder(resp.Body).Decode(&doc)
				resp.Body.Close()
				if resp.StatusCode != 201 || err != nil {
					t.Errorf("create: %d %v", resp.StatusCode, err)
					return
				}
				mu.Lock()
				ids = append(ids, doc.ID)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.Done
	q := startServe(t, "", []string{"EDGEPLANE_DURABILITY=full"}, "--db", db, "--listen", "127.0.0.1:0")
	for _, id := range ids {
		if status, code := getIPPolicy(t, q, token, id); status != 200 {
			t.Fatalf("acknowledged policy %s after the kill: %d %s", id, status, code)
		}
	}
	if len(ids) != writers*each {
		t.Fatalf("%d creates acknowledged, want %d", len(ids), writers*each)
	}
}
