package agents

import (
	"context"
	"fmt"
	"regexp"
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

// moveRE finds the lines of ngrok-go's log that start and end an agent's move: the session
// lost (its reconnect loop starts) and a session established again, its binds made.
var moveRE = regexp.MustCompile(`(?m)^(\d\d:\d\d:\d\d\.\d+) agent=(\S+) level=\S+ msg="(session closed, starting reconnect loop|client session established|failed to reconnect session)"`)

// moves returns, by agent name, how long each of its moves took as ngrok-go saw it (from its
// session lost to its binds made again elsewhere), and how many reconnect attempts failed.
func (l *agentLogs) moves() (took map[string][]time.Duration, failed map[string]int) {
	took, failed = map[string][]time.Duration{}, map[string]int{}
	lost := map[string]time.Time{}
	for _, m := range moveRE.FindAllStringSubmatch(l.out.String(), -1) {
		at, err := time.Parse("15:04:05.000000", m[1])
		if err != nil {
			continue
		}
		switch m[3] {
		case "session closed, starting reconnect loop":
			lost[m[2]] = at
		case "failed to reconnect session":
			failed[m[2]]++
		default:
			if start, ok := lost[m[2]]; ok {
				took[m[2]] = append(took[m[2]], at.Sub(start).Round(time.Millisecond))
				delete(lost, m[2])
			}
		}
	}
	return took, failed
}

// report logs each agent's moves: how long each took and the reconnect attempts that failed.
func (l *agentLogs) report(t *testing.T) {
	took, failed := l.moves()
	names := make([]string, 0, len(took))
	for name := range took {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Logf("agent %s moved %d time(s), each from its session lost to its binds made again: %v (%d failed reconnect attempts)",
			name, len(took[name]), took[name], failed[name])
	}
}
