package plan

import (
	"fmt"
	"reflect"
	"sync"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// StageBuilder builds the stage of one route module from its configuration (the module's
// response shape, e.g. *ep.EndpointHeaders) and the account's snapshot. An error fails the
// route closed, naming the module.
type StageBuilder func(cfg any, s *Snapshot) (enforce.Stage, error)

// routeStages is the table of route modules that act on requests: one entry per module, each
// in a file of its own (stage_<module>.go) next to its enforce/ stage. Stages run in the order
// of the module table.
var routeStages = map[string]StageBuilder{}

// registerRouteStage adds a module's stage builder; called from the init of its file.
func registerRouteStage(name string, f StageBuilder) {
	if _, dup := routeStages[name]; dup {
		panic("plan: route stage " + name + " registered twice")
	}
	routeStages[name] = f
}

// stagedModule is a route module with a stage, and its builder.
type stagedModule struct {
	m     *ep.Module
	build StageBuilder
}

// stagedRouteModules lists the route modules with a stage in the module table's order, made
// once: a rebuild walks it for every route (100,000 routes in the scale benchmark), where
// looking each module up in routeStages cost a quarter of Build (BenchmarkBuild).
var stagedRouteModules = sync.OnceValue(func() []stagedModule {
	var list []stagedModule
	for _, m := range ep.ModulesOf(ep.HTTPSEdgeRoutes) {
		if build, ok := routeStages[m.Name]; ok {
			list = append(list, stagedModule{m, build})
		}
	}
	return list
})

// routeStages builds the stages of a route's enabled modules, in the module table's order.
func (b *builder) routeStages(r *ep.HTTPSEdgeRoute, rt *Route) error {
	for _, sm := range stagedRouteModules() {
		m, build := sm.m, sm.build
		v := m.Get(r)
		if v == nil || !enabledModule(v) {
			if signInModules[m.Name] && configuredModule(v) {
				// A sign-in module turned off still removes the client's ngrok-auth-* headers:
				// the upstream trusts them while it is on.
				if rt.Chain == nil {
					rt.Chain = &enforce.Chain{}
				}
				rt.Chain.HTTP = append(rt.Chain.HTTP, enforce.IdentityHeaderStrip{Module: m.Name})
			}
			continue
		}
		st, err := build(v, b.s)
		if err != nil {
			return fmt.Errorf("%s (%v)", m.Name, err)
		}
		if rt.Chain == nil {
			rt.Chain = &enforce.Chain{}
		}
		rt.Chain.HTTP = append(rt.Chain.HTTP, st)
	}
	return nil
}

// signInModules are the route modules that tell the upstream who signed in (ngrok-auth-*).
var signInModules = map[string]bool{"oauth": true, "oidc": true, "saml": true}

// configuredModule reports whether a route holds a module's configuration (enabled or not).
func configuredModule(v any) bool {
	if v == nil {
		return false
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() != reflect.Pointer || !rv.IsNil()
}
