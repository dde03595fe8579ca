package trafficpolicy

import (
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
)

// A policy's own state, beside the variables of the traffic: the variables set-vars defines
// (vars.*), kept for the rest of their phase, and the results of actions
// (actions.ngrok.<action>.*), kept for the rest of the request. Both are entries of the
// variables map, so that the map can be rebuilt (after an action changed the request) with them
// carried over (CarryState).

// SetVar sets the variable vars.<name> for the rest of the phase.
func SetVar(vars map[string]any, name string, value any) {
	m, _ := vars["vars"].(map[string]any)
	if m == nil {
		m = map[string]any{}
		vars["vars"] = m
	}
	m[name] = value
}

// SetResult records the results of an action as actions.ngrok.<name>, replacing those of an
// earlier run of the same action (ngrok keeps the last run's only).
func SetResult(vars map[string]any, name string, result map[string]any) {
	a, _ := vars["actions"].(map[string]any)
	if a == nil {
		a = map[string]any{"ngrok": map[string]any{}}
		vars["actions"] = a
	}
	a["ngrok"].(map[string]any)[name] = result
}

// CarryState copies the policy's state (vars and action results) of from into to. Variables are
// scoped to their phase, so withVars false carries the action results only.
func CarryState(from, to map[string]any, withVars bool) {
	if from == nil {
		return
	}
	if v, ok := from["actions"]; ok {
		to["actions"] = v
	}
	if v, ok := from["vars"]; withVars && ok {
		to["vars"] = v
	}
}

// Reads reports whether an expression or interpolation of the document reads the variable name
// (actions, vars, …; conn.bytes for conn.bytes_in or conn.bytes_out; conn.tls.ja4_fingerprint),
// so that a stage records only what some rule can read.
func (p *Policy) Reads(name string) bool { return p.reads[name] }

// Condition is http-request's retry_condition: a CEL expression over attempts (the number of
// attempts so far) and last_attempt (the last attempt's req, res and error).
type Condition struct{ prg cel.Program }

var (
	retryOnce sync.Once
	retryEnv  *cel.Env
)

// CompileRetryCondition compiles a retry condition, which must be a bool.
func CompileRetryCondition(expr string) (*Condition, error) {
	retryOnce.Do(func() {
		opts := append([]cel.EnvOption{cel.Variable("attempts", cel.IntType),
			cel.Variable("last_attempt", cel.MapType(cel.StringType, cel.DynType))}, macros...)
		var err error
		if retryEnv, err = cel.NewEnv(opts...); err != nil {
			panic("trafficpolicy: the retry condition's environment: " + err.Error())
		}
	})
	prg, _, err := compile(retryEnv, expr)
	if err != nil {
		return nil, err
	}
	return &Condition{prg: prg}, nil
}

// Retry evaluates the condition after an attempt.
func (c *Condition) Retry(attempts int, last map[string]any) (bool, error) {
	out, _, err := c.prg.Eval(map[string]any{"attempts": int64(attempts), "last_attempt": last})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("the retry condition is %v, not a bool", out.Type())
	}
	return b, nil
}
