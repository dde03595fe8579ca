package edgeplane

// The live collections: what agents have online right now. Their objects are not made through
// the API but by agents connecting and binding; the store keeps them as rows of the replica
// holding the agent (store/agents.go), and the API lists and gets them with the same generic
// code as every other collection. created_at equals started_at.

// TunnelSession is an online agent session (schema "TunnelSession").
type TunnelSession struct {
	Meta
	AgentVersion string `json:"agent_version"`
	Credential   *Ref   `json:"credential"`
	IP           string `json:"ip"`
	Metadata     string `json:"metadata"`
	OS           string `json:"os"`
	Region       string `json:"region"`
	StartedAt    string `json:"started_at"`
	Transport    string `json:"transport"`
}

// Tunnel is an online tunnel of an agent session (schema "Tunnel"): a plain endpoint bind
// (public_url, proto) or a labeled tunnel for edges (labels).
type Tunnel struct {
	Meta
	PublicURL     string            `json:"public_url"`
	StartedAt     string            `json:"started_at"`
	Metadata      string            `json:"metadata"`
	Proto         string            `json:"proto"`
	Region        string            `json:"region"`
	TunnelSession *Ref              `json:"tunnel_session"`
	Labels        map[string]string `json:"labels"`
	ForwardsTo    string            `json:"forwards_to"`
	// Endpoint is null: edgeplane has no endpoint objects. Backends are the tunnel group
	// backends the tunnel serves, filled in when the tunnel is read.
	Endpoint *Ref  `json:"endpoint"`
	Backends []Ref `json:"backends"`
}

// Agent session commands (POST /tunnel_sessions/{id}/<command>).
const (
	CommandRestart = "restart"
	CommandStop    = "stop"
	CommandUpdate  = "update"
)

// TunnelSessions is /tunnel_sessions: list, get, and the restart, stop and update commands.
var TunnelSessions = &Resource{
	Kind: "tunnel_session", Path: "/tunnel_sessions", ListKey: "tunnel_sessions", Prefix: "ts", Ops: OpGet | OpList,
	New:     func() Document { return new(TunnelSession) },
	Actions: []string{CommandRestart, CommandStop, CommandUpdate},
}

// Tunnels is /tunnels: list and get.
var Tunnels = &Resource{
	Kind: "tunnel", Path: "/tunnels", ListKey: "tunnels", Prefix: "tn", Ops: OpGet | OpList,
	New: func() Document { return new(Tunnel) },
}

// LiveResources is the table of live collections.
var LiveResources = []*Resource{TunnelSessions, Tunnels}

// Error codes of the session commands (edgeplane's own, in the 9000 family of service errors).
const (
	CodeCommandUnsupported = 9010 // the agent did not declare support for the command (409)
	CodeCommandFailed      = 9011 // the agent answered the command with an error, or not at all (502)
	CodeSessionElsewhere   = 9012 // the session is held by a replica that did not take the command (503)
)
