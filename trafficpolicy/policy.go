// Package trafficpolicy reads ngrok traffic policy documents: the phases on_tcp_connect,
// on_http_request, on_http_response and on_event_stream_message, each a list of rules whose CEL expressions decide
// whether the rule's actions run. Parse checks a document the way ngrok's API does (unknown
// phases, keys and action types, actions in a phase that does not support them, expressions that
// do not compile, and the configuration of the actions edgeplane applies) and compiles every
// expression once; the data plane's stage (enforce.TrafficPolicy) only evaluates them.
package trafficpolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	"go.yaml.in/yaml/v3"
)

// The phases of a document, in the order traffic meets them.
const (
	OnTCPConnect   = "on_tcp_connect"
	OnHTTPRequest  = "on_http_request"
	OnHTTPResponse = "on_http_response"
	// OnEventStreamMessage runs on each message of a server-sent event stream (a response of
	// type text/event-stream), as it passes: sse-find-replace's phase.
	OnEventStreamMessage = "on_event_stream_message"
)

// Policy is a parsed document: the rules of each phase, in order, with their expressions
// compiled.
type Policy struct {
	OnTCPConnect   []*Rule
	OnHTTPRequest  []*Rule
	OnHTTPResponse []*Rule
	// OnEventStreamMessage are the rules run on each message of an event stream.
	OnEventStreamMessage []*Rule
	// unavailable is what the document reads that edgeplane cannot fill, each "path: name: why".
	unavailable []string
	// reads are the top-level names of the variables the document reads (vars, actions, req…).
	reads map[string]bool
}

// note records what an expression or interpolation at path reads.
func (p *Policy) note(path string, r refs) {
	for _, m := range r.unavailable {
		p.unavailable = append(p.unavailable, path+": "+m)
	}
	for _, root := range r.roots {
		if p.reads == nil {
			p.reads = map[string]bool{}
		}
		p.reads[root] = true
	}
}

// Unavailable returns an error naming the first variable or function the document reads that
// edgeplane cannot fill (a geolocation, ngrok's secrets vaults, …), or nil. The API accepts such
// a document, as ngrok does; the data plane's stages refuse it, so that the policy fails closed
// rather than run as if the value were empty.
func (p *Policy) Unavailable() error {
	if len(p.unavailable) == 0 {
		return nil
	}
	return errors.New(p.unavailable[0])
}

// Rule is one rule of a phase: its actions run, in order, when every expression is true (a rule
// without expressions always runs).
type Rule struct {
	Name        string
	Phase       string
	Path        string // where the rule is in the document, say on_http_request[2], for errors
	Expressions []string
	Actions     []*Action
	programs    []cel.Program
	// reads are the full names of the variables its expressions read, for TLSSelector.
	reads []string
}

// Action is one action of a rule: its type and its configuration as the document gave it.
type Action struct {
	Type   string
	Config map[string]any
	Path   string // on_http_request[2].actions[0]
	Phase  string
}

// Error is a document ngrok would refuse: Path names where (a phase, rule, expression or
// action), Msg what is wrong.
type Error struct {
	Path, Msg string
}

// Error is the path and the message, as the API answers them.
func (e *Error) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

func errorf(path, format string, args ...any) *Error {
	return &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// Parse reads a document, JSON or YAML, checks it and compiles its expressions.
func Parse(doc string) (*Policy, error) {
	raw, err := decode(doc)
	if err != nil {
		return nil, err
	}
	p := &Policy{}
	for _, phase := range slices.Sorted(maps.Keys(raw)) {
		var into *[]*Rule
		switch phase {
		case OnTCPConnect:
			into = &p.OnTCPConnect
		case OnHTTPRequest:
			into = &p.OnHTTPRequest
		case OnHTTPResponse:
			into = &p.OnHTTPResponse
		case OnEventStreamMessage:
			into = &p.OnEventStreamMessage
		default:
			return nil, errorf(phase, "%q is not a traffic policy phase (on_tcp_connect, on_http_request, on_http_response, on_event_stream_message)", phase)
		}
		if raw[phase] == nil {
			continue
		}
		list, ok := raw[phase].([]any)
		if !ok {
			return nil, errorf(phase, "must be a list of rules")
		}
		for i, r := range list {
			rule, err := parseRule(phase, fmt.Sprintf("%s[%d]", phase, i), r, p)
			if err != nil {
				return nil, err
			}
			if err := checkTerminateTLSRule(rule); err != nil {
				return nil, err
			}
			*into = append(*into, rule)
		}
	}
	return p, nil
}

// decode reads JSON (a document starting with "{") or YAML into a mapping.
func decode(doc string) (map[string]any, error) {
	trimmed := strings.TrimSpace(doc)
	var v any
	if strings.HasPrefix(trimmed, "{") {
		if err := json.Unmarshal([]byte(trimmed), &v); err != nil {
			return nil, errorf("", "not a valid JSON object: %v", err)
		}
	} else if err := yaml.Unmarshal([]byte(trimmed), &v); err != nil {
		return nil, errorf("", "neither a JSON object nor a YAML mapping: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errorf("", "the top level must be a mapping of phases to rules")
	}
	return m, nil
}

func parseRule(phase, path string, v any, p *Policy) (*Rule, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errorf(path, "a rule must be a mapping with expressions and actions")
	}
	r := &Rule{Phase: phase, Path: path}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch k {
		case "name":
			s, ok := m[k].(string)
			if !ok && m[k] != nil {
				return nil, errorf(path+".name", "must be a string")
			}
			r.Name = s
		case "expressions":
			list, ok := m[k].([]any)
			if !ok && m[k] != nil {
				return nil, errorf(path+".expressions", "must be a list of CEL expressions")
			}
			for i, e := range list {
				s, ok := e.(string)
				if !ok {
					return nil, errorf(fmt.Sprintf("%s.expressions[%d]", path, i), "must be a string")
				}
				r.Expressions = append(r.Expressions, s)
			}
		case "actions":
			list, ok := m[k].([]any)
			if !ok && m[k] != nil {
				return nil, errorf(path+".actions", "must be a list of actions")
			}
			for i, a := range list {
				act, err := parseAction(phase, fmt.Sprintf("%s.actions[%d]", path, i), a, p)
				if err != nil {
					return nil, err
				}
				r.Actions = append(r.Actions, act)
			}
		default:
			return nil, errorf(path, "unknown field %q (a rule has name, expressions and actions)", k)
		}
	}
	if len(r.Actions) == 0 {
		return nil, errorf(path+".actions", "a rule needs at least one action")
	}
	env := envFor(phase)
	for i, e := range r.Expressions {
		prg, refs, err := compile(env, e)
		if err != nil {
			return nil, errorf(fmt.Sprintf("%s.expressions[%d]", path, i), "%v", err)
		}
		p.note(fmt.Sprintf("%s.expressions[%d]", path, i), refs)
		r.programs = append(r.programs, prg)
		r.reads = append(r.reads, refs.names...)
	}
	return r, nil
}

func parseAction(phase, path string, v any, p *Policy) (*Action, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errorf(path, "an action must be a mapping with a type and its config")
	}
	a := &Action{Path: path, Phase: phase}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch k {
		case "type":
			s, ok := m[k].(string)
			if !ok {
				return nil, errorf(path+".type", "must be a string")
			}
			a.Type = s
		case "config":
			if m[k] == nil {
				continue
			}
			c, ok := m[k].(map[string]any)
			if !ok {
				return nil, errorf(path+".config", "must be a mapping")
			}
			a.Config = c
		default:
			return nil, errorf(path, "unknown field %q (an action has type and config)", k)
		}
	}
	if a.Type == "" {
		return nil, errorf(path+".type", "is required")
	}
	phases, known := actionPhases[a.Type]
	if !known {
		return nil, errorf(path+".type", "%q is not a traffic policy action", a.Type)
	}
	if !slices.Contains(phases, phase) {
		return nil, errorf(path+".type", "the %s action cannot be used in %s (only in %s)", a.Type, phase, strings.Join(phases, ", "))
	}
	if impl := implemented[a.Type]; impl != nil {
		if _, err := impl(a); err != nil {
			return nil, err
		}
		if err := checkTemplates(phase, a.Path+".config", a.Config, p); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// checkTemplates compiles the CEL interpolations (${…}) of every string of an action's
// configuration, so that one that does not compile is refused with the document.
func checkTemplates(phase, path string, v any, p *Policy) error {
	switch v := v.(type) {
	case string:
		if strings.Contains(v, "${") {
			t, err := CompileTemplate(phase, v)
			if err != nil {
				return errorf(path, "%v", err)
			}
			p.note(path, t.refs)
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if err := checkTemplates(phase, path+"."+k, v[k], p); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := checkTemplates(phase, fmt.Sprintf("%s[%d]", path, i), e, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// Match reports whether every expression of the rule is true for the variables vars (built
// with ConnVars, RequestVars, and ResponseVars in the response phase). An expression that fails
// to evaluate (a missing map key, the cost limit) is an error, never a silent false or true.
func (r *Rule) Match(vars map[string]any) (bool, error) {
	for i, prg := range r.programs {
		out, _, err := prg.Eval(activation(vars))
		if err != nil {
			return false, fmt.Errorf("%s.expressions[%d]: %v", r.Path, i, err)
		}
		b, ok := out.Value().(bool)
		if !ok {
			return false, fmt.Errorf("%s.expressions[%d]: the result is %v, not a bool", r.Path, i, out.Type())
		}
		if !b {
			return false, nil
		}
	}
	return true, nil
}

// Rules returns every rule of the document, phase by phase.
func (p *Policy) Rules() []*Rule {
	return slices.Concat(p.OnTCPConnect, p.OnHTTPRequest, p.OnHTTPResponse, p.OnEventStreamMessage)
}

// errNotBool is what compile reports for an expression whose type is not bool.
var errNotBool = errors.New("the expression must evaluate to a bool")
