// Package peer is the link between edgeplane replicas. A public connection that arrives at
// replica A for a tunnel whose agent is connected to replica B is carried to B as one stream of
// A's link to B; B opens the agent's stream for it (Config.Accept) and copies bytes both ways.
// The link is a transparent byte pipe: A terminates TLS and runs the modules as for a local
// tunnel, and the agent sees the proxy header A asked for.
//
// # Identity
//
// Each replica issues itself a link certificate from edgeplane's CA (IssueCertificate,
// Identity): a new ECDSA P-256 key, valid for 7 days and renewed once half of that has passed,
// for TLS server and client authentication, whose one subject alternative name is the URI
// "edgeplane-replica:<replica id>" and which names no host. Both ends speak TLS 1.3 only, with
// the application protocol "edgeplane-link/1", and verify each other's chain to edgeplane's CA
// and nothing else. The listener requires a client certificate naming a replica; the dialler
// requires the server's certificate to name the replica it meant to reach. Endpoint and
// agent-listener certificates of the same CA name hosts and never a replica, so they open no
// link; a connection without a link certificate fails its handshake and nothing it sends is
// read.
//
// # Connections and streams
//
// A replica dials one link to each peer it forwards to (A dials B for A's streams, B dials A for
// its own) and keeps it up while SetPeers names the peer: one TLS connection, multiplexed with
// muxado. Dial opens one stream per public connection:
//
//	opener → holder: kind 1, the length of the request (2 bytes, big-endian), the request as
//	                 JSON (Request: the tunnel's row id and the proxy header's fields), at most
//	                 4 KiB in all, within 5 s of the stream's opening
//	holder → opener: status 0 (ok), or 1 (no such tunnel), 2 (the agent could not be reached),
//	                 3 (busy), each followed by a message of at most 255 bytes (1-byte length)
//	then:            the public connection's bytes both ways; a half-close is carried through
//
// A refusal reaches Dial as ErrNoTunnel or ErrAgentDial; a link that cannot be had, breaks, or
// does not answer in time as ErrUnavailable, so the public side chooses its error page.
//
// # Bounds
//
// Every stream has a 256 KiB flow-control window at each end (Window), so a slow agent or
// public client holds up only its own stream, and at most Config.MaxStreams (4096 by default) forwarded streams
// are open on a link in each direction: the memory a link can make a replica hold for unread
// bytes is at most MaxStreams × Window each way (twice that for a peer that also fills the
// streams the holder has not yet taken). The dialler refuses a stream past the limit
// itself; the holder answers one past its own limit "busy". The TCP connect and TLS handshake
// take at most 5 s, the holder's answer at most 10 s.
//
// The dialler pings its peer every second on a stream of its own, which the peer echoes, and
// either end closes a link from which it has read nothing at all for 5 s: any frame counts, so
// a link busy with bulk transfers is not mistaken for a dead one. Closing a link fails its
// streams at once, both ways, and the holder closes the agents' streams it carried. A peer that
// could not be reached is not dialled again before a backoff, 250 ms doubling to 2 s, during
// which Dial fails at once; Up reports whether a peer's link is up, for the directory to route
// only to peers it can reach.
//
// A peer is authenticated but still never trusted to be well behaved: its link is cut (and no
// other) on a header that is not a replica's, a stream of unknown kind, a second ping stream, a
// stream opened by the replica that was dialled, and on the frames muxado would otherwise buffer
// or keep without bound (guard.go): a DATA frame larger than the window, a stream overrunning
// its window, streams opened faster than they are taken, a long GOAWAY, a frame of unknown type.
package peer
