package tunnel

import (
	"errors"
	"io"
	"os"
	"time"

	"golang.ngrok.com/muxado/v2"
	"golang.ngrok.com/muxado/v2/frame"
)

// Heartbeats. Every agent opens one heartbeat stream (type 0xFFFFFFFF) as soon as it connects,
// before Auth, and writes a 4-byte ping every HeartbeatInterval that the other side echoes.
// edgeplane echoes those pings and takes them as its evidence that the
// agent is alive: a session whose agent has sent no ping for HeartbeatInterval +
// HeartbeatTolerance is ended, which is the window after which the agent itself would give up.
//
// edgeplane does not ping agents itself, although muxado's Heartbeat wrapper would. The protocol
// lets either side ping and the agents do not need the server's pings; the wrapper costs two
// goroutines, a timer goroutine's channel and a math/rand source per session, and a second ping
// stream doubles the frames an idle session costs. At 10,000 idle sessions those were a third of
// edgeplane's memory and CPU at rest (docs/performance.md). What is left per session is one
// runtime timer (the watchdog below); the echo goroutine ends once the framer answers.
const heartbeatType muxado.StreamType = 0xFFFFFFFF

// Defaults and bounds of the agent's announced heartbeat settings (AuthExtra, nanoseconds).
const (
	defaultHeartbeatInterval  = 10 * time.Second
	defaultHeartbeatTolerance = 15 * time.Second
	minHeartbeat              = time.Second
	maxHeartbeat              = 5 * time.Minute
)

// heartbeatWindow is how long a session may go without a ping from its agent: the interval and
// tolerance the agent announced, each within [1 s, 5 min], or ngrok's defaults.
func heartbeatWindow(a authMsg) time.Duration {
	iv, tol := time.Duration(a.Extra.HeartbeatInterval), time.Duration(a.Extra.HeartbeatTolerance)
	if iv < minHeartbeat || iv > maxHeartbeat {
		iv = defaultHeartbeatInterval
	}
	if tol < minHeartbeat || tol > maxHeartbeat {
		tol = defaultHeartbeatTolerance
	}
	return iv + tol
}

// acceptHeartbeat takes the agent's heartbeat stream and echoes its pings until it ends. Only
// one is served per session: a second is closed, so an agent cannot make edgeplane hold a
// goroutine per stream.
func (s *session) acceptHeartbeat(st muxado.TypedStream) {
	s.mu.Lock()
	first := !s.beating
	s.beating = true
	s.mu.Unlock()
	if !first {
		st.Close()
		return
	}
	s.guard.heartbeat(frame.StreamId(st.Id()), s.pinged)
	go s.echo(st)
}

// echoHandover is how long the echo goroutine waits for a ping muxado buffered before the framer
// took the heartbeat stream over (beat.go). Past it no ping can still be in muxado's buffer, since
// the framer answers every later one, so the goroutine ends and the session keeps no goroutine for
// its heartbeat. Each gateway keeps its own copy (Gateway.echoHandover), which tests shorten
// before serving, so no session reads a value a test changes.
const echoHandover = 30 * time.Second

// echo answers each 4-byte ping muxado delivers on the stream with the same 4 bytes and feeds the
// watchdog: the pings that arrived before the framer took the stream over (beat.go). Once none
// has come for echoHandover it returns and leaves the stream open: the framer answers from then
// on, and closing the stream would end the agent's heartbeat. The stream ending ends nothing by
// itself: the watchdog then ends the session when its window passes.
func (s *session) echo(st muxado.TypedStream) {
	var ping [4]byte
	for {
		st.SetReadDeadline(time.Now().Add(s.gw.echoHandover))
		if _, err := io.ReadFull(st, ping[:]); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				st.Close()
			}
			return
		}
		if _, err := st.Write(ping[:]); err != nil {
			st.Close()
			return
		}
		s.pinged()
	}
}

// pinged feeds the watchdog: a ping arrived.
func (s *session) pinged() {
	s.mu.Lock()
	if s.watchdog != nil {
		s.watchdog.Reset(s.beatWindow)
	}
	s.mu.Unlock()
}

// startWatchdog arms the heartbeat watchdog once Auth has told the agent's interval: from then on
// the session ends when no ping arrives within the window.
func (s *session) startWatchdog() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beatWindow = heartbeatWindow(s.auth)
	s.watchdog = time.AfterFunc(s.beatWindow, func() {
		s.gw.log.Info("agent session ended: no heartbeat", "session", s.id, "window", s.beatWindow)
		s.lost.Store(true) // its link is gone, not its agent: keep its rows for its return
		s.close()
	})
}

// stopWatchdog disarms the watchdog when the session ends.
func (s *session) stopWatchdog() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watchdog != nil {
		s.watchdog.Stop()
	}
}
