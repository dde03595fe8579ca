package agents

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	ngroklog "golang.ngrok.com/ngrok/log"
)

// agentLog keeps what ngrok-go logs about its sessions (dials, reconnects and why one failed,
// its backoff), with the time and the session's name, for a test to show when it fails: ngrok-go
// says nothing otherwise, and a request lost while an agent moves is explained only by it.
type agentLog struct {
	name string
	out  *lockedBuffer
}

// Log writes one line: time, session name, level, message and its fields in a stable order.
func (l agentLog) Log(_ context.Context, level ngroklog.LogLevel, msg string, data map[string]any) {
	if level > ngroklog.LogLevelDebug {
		return // trace: every heartbeat
	}
	lvl, _ := ngroklog.StringFromLogLevel(level)
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s agent=%s level=%s msg=%q", time.Now().UTC().Format("15:04:05.000000"), l.name, lvl, msg)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%q", k, fmt.Sprint(data[k]))
	}
	b.WriteByte('\n')
	_, _ = l.out.Write([]byte(b.String()))
}

// agentLogs collects the logs of a test's ngrok-go sessions and prints them if the test fails.
type agentLogs struct{ out lockedBuffer }

// newAgentLogs returns logs printed at the end of t when it has failed.
func newAgentLogs(t *testing.T) *agentLogs {
	l := &agentLogs{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ngrok-go's logs:\n%s", l.out.String())
		}
	})
	return l
}

// option is the ConnectOption that logs the session under name.
func (l *agentLogs) option(name string) ngrok.ConnectOption {
	return ngrok.WithLogger(agentLog{name: name, out: &l.out})
}
