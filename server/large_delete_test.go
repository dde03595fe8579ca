package server_test

import (
	"sync"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/server"
	"github.com/edgeplane/edgeplane/store"
)

// TestLargeBotUserDelete: deleting a bot user with more keys than one delete transaction takes
// (store.CascadeChunk) answers as any delete does, 204 once all of it is gone: the bot user, its
// keys and its credentials answer 404, its keys 401 ERR_NGROK_203, and it can own nothing new
// (the steps in between are tested in the store).
func TestLargeBotUserDelete(t *testing.T) {
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) {
			e := newEnvOn(t, engine, server.Config{})
			admin := e.admin.token
			botID := e.do(admin, "POST", "/bot_users", map[string]any{"name": "many keys"}).must(t, 201).str("id")
			const keys = store.CascadeChunk + 44
			var (
				mu     sync.Mutex
				tokens = map[string]string{} // key id → token
			)
			for batch := 0; batch < keys; batch += 16 {
				concurrently(min(16, keys-batch), func(int) {
					k := e.do(admin, "POST", "/api_keys", map[string]any{"owner_id": botID}).must(t, 201)
					mu.Lock()
					tokens[k.str("id")] = k.str("token")
					mu.Unlock()
				})
			}
			cred := e.do(admin, "POST", "/credentials", map[string]any{"owner_id": botID}).must(t, 201).str("id")

			e.do(admin, "DELETE", "/bot_users/"+botID, nil).must(t, 204)
			if st := e.st.DeleteStats(); st.Chunked != 1 || st.MaxObjects > store.CascadeChunk {
				t.Fatalf("delete stats %+v: want one delete in chunks of at most %d objects", st, store.CascadeChunk)
			}
			e.do(admin, "GET", "/bot_users/"+botID, nil).wantError(t, 404, ep.CodeNotFound)
			e.do(admin, "DELETE", "/bot_users/"+botID, nil).wantError(t, 404, ep.CodeNotFound)
			e.do(admin, "GET", "/credentials/"+cred, nil).wantError(t, 404, ep.CodeNotFound)
			for id, token := range tokens {
				e.do(token, "GET", "/api_keys", nil).wantError(t, 401, ep.CodeAuthUnknown)
				e.do(admin, "GET", "/api_keys/"+id, nil).wantError(t, 404, ep.CodeNotFound)
			}
			e.do(admin, "POST", "/api_keys", map[string]any{"owner_id": botID}).wantError(t, 400, ep.CodeInvalid)
			if left := e.do(admin, "GET", "/api_keys", nil).must(t, 200).items(t, "keys"); len(left) != 1 {
				t.Fatalf("%d keys left, want the admin's own", len(left))
			}
		})
	}
}
