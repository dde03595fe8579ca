package plan

import (
	"fmt"
	"slices"
	"strings"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// The request_headers and response_headers modules of a route become enforce.Headers stages.
// The API refuses headers the modules may not touch; a configuration stored before that rule
// (or edited outside the API) that names one fails the route closed instead.
func init() {
	registerRouteStage("request_headers", func(cfg any, _ *Snapshot) (enforce.Stage, error) {
		add, remove, err := headerEdits(cfg.(*ep.EndpointHeaders))
		if err != nil {
			return nil, err
		}
		return enforce.NewRequestHeaders(add, remove)
	})
	registerRouteStage("response_headers", func(cfg any, _ *Snapshot) (enforce.Stage, error) {
		add, remove, err := headerEdits(cfg.(*ep.EndpointHeaders))
		if err != nil {
			return nil, err
		}
		return enforce.NewResponseHeaders(add, remove)
	})
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
