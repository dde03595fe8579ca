package plan

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// The request_headers and response_headers modules of a route become enforce.Headers stages.
// The API refuses headers the modules may not touch; a configuration stored before that rule
// (or edited outside the API) that names one fails the route closed instead.
func routeRequestHeaders(cfg any, _ RouteEnv) (enforce.Stage, error) {
	add, remove, err := headerEdits(cfg.(*ep.EndpointHeaders))
	if err != nil {
		return nil, err
	}
	return enforce.NewRequestHeaders(add, remove)
}

func routeResponseHeaders(cfg any, _ RouteEnv) (enforce.Stage, error) {
	add, remove, err := headerEdits(cfg.(*ep.EndpointHeaders))
	if err != nil {
		return nil, err
	}
	return enforce.NewResponseHeaders(add, remove)
}

// headerEdits turns the module's map and list into the stage's edits, in a stable order.
func headerEdits(m *ep.EndpointHeaders) ([]enforce.HeaderValue, []string, error) {
	var add []enforce.HeaderValue
	names := make([]string, 0, len(m.Add))
	for k := range m.Add {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	for _, name := range names {
		if why := ep.FixedHeader(name); why != "" {
			return nil, nil, fmt.Errorf("%q cannot be added: %s", name, why)
		}
		add = append(add, enforce.HeaderValue{Name: name, Value: m.Add[name]})
	}
	for _, name := range m.Remove {
		if why := ep.FixedHeader(name); why != "" {
			return nil, nil, fmt.Errorf("%q cannot be removed: %s", name, why)
		}
	}
	return add, m.Remove, nil
}

// An agent's RequestHeaders and ResponseHeaders options: {"add": ["Name:value", …], "remove":
// [names], "addParsed": {name: value}} (ngrok-go sends "Name:value" entries; a space after the
// colon, as ngrok's CLI writes them, is not part of the value). Headers the API refuses
// (edgeplane.FixedHeader) refuse the bind.
func bindRequestHeaders(raw json.RawMessage, _ BindEnv) (enforce.Stage, error) {
	add, remove, err := bindHeaderEdits(raw)
	if err != nil {
		return nil, err
	}
	return enforce.NewRequestHeaders(add, remove)
}

func bindResponseHeaders(raw json.RawMessage, _ BindEnv) (enforce.Stage, error) {
	add, remove, err := bindHeaderEdits(raw)
	if err != nil {
		return nil, err
	}
	return enforce.NewResponseHeaders(add, remove)
}

// bindHeaderEdits decodes and checks a headers option.
func bindHeaderEdits(raw json.RawMessage) ([]enforce.HeaderValue, []string, error) {
	var o struct {
		Add       []string          `json:"add"`
		Remove    []string          `json:"remove"`
		AddParsed map[string]string `json:"addParsed"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, nil, fmt.Errorf("the option is not {\"add\": [\"name:value\"], \"remove\": [\"name\"]}: %v", err)
	}
	var add []enforce.HeaderValue
	for _, entry := range o.Add {
		name, value, ok := strings.Cut(entry, ":")
		if !ok {
			return nil, nil, fmt.Errorf("add %q is not name:value", entry)
		}
		add = append(add, enforce.HeaderValue{Name: strings.TrimSpace(name), Value: strings.TrimSpace(value)})
	}
	for _, name := range slices.Sorted(maps.Keys(o.AddParsed)) {
		add = append(add, enforce.HeaderValue{Name: name, Value: o.AddParsed[name]})
	}
	for _, a := range add {
		if !ep.ValidHeaderName(a.Name) {
			return nil, nil, fmt.Errorf("add %q: not a valid HTTP header name", a.Name)
		}
		if why := ep.FixedHeader(a.Name); why != "" {
			return nil, nil, fmt.Errorf("add %q: this header cannot be added: %s", a.Name, why)
		}
		if !ep.ValidHeaderValue(a.Value) {
			return nil, nil, fmt.Errorf("add %q: the value has characters not allowed in an HTTP header", a.Name)
		}
	}
	for _, name := range o.Remove {
		if !ep.ValidHeaderName(name) {
			return nil, nil, fmt.Errorf("remove %q: not a valid HTTP header name", name)
		}
		if why := ep.FixedHeader(name); why != "" {
			return nil, nil, fmt.Errorf("remove %q: this header cannot be removed: %s", name, why)
		}
	}
	return add, o.Remove, nil
}
