package trafficpolicy

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types/ref"
)

// Template is a configuration value with CEL interpolation, as ngrok documents it: literal text
// with ${expression} parts, each replaced by its value (as a string) when the action runs. The
// expressions are compiled with the variables of the action's phase when the document is parsed.
type Template struct {
	raw   string
	parts []templatePart
	// refs is what the expressions read (inspect).
	refs refs
}

// templatePart is literal text, or an expression when prg is set.
type templatePart struct {
	lit string
	prg cel.Program
}

// CompileTemplate reads s for ${…} parts and compiles them in phase's environment. An expression
// that does not compile, or a ${ without its closing brace, is an error naming it.
func CompileTemplate(phase, s string) (*Template, error) {
	t := &Template{raw: s}
	rest := s
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			break
		}
		if i > 0 {
			t.parts = append(t.parts, templatePart{lit: rest[:i]})
		}
		end := closingBrace(rest[i+2:])
		if end < 0 {
			return nil, fmt.Errorf("%q: a ${ without its closing }", s)
		}
		expr := rest[i+2 : i+2+end]
		env := envFor(phase)
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			return nil, fmt.Errorf("${%s}: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast, cel.CostLimit(CostLimit))
		if err != nil {
			return nil, fmt.Errorf("${%s}: %v", expr, err)
		}
		r := inspect(ast)
		t.refs.unavailable = append(t.refs.unavailable, r.unavailable...)
		t.refs.roots = append(t.refs.roots, r.roots...)
		t.parts = append(t.parts, templatePart{prg: prg})
		rest = rest[i+2+end+1:]
	}
	if rest != "" {
		t.parts = append(t.parts, templatePart{lit: rest})
	}
	return t, nil
}

// closingBrace returns the index of the } that closes an interpolation in s (which starts just
// after its ${), skipping braces inside quoted strings and nested maps; -1 when there is none.
func closingBrace(s string) int {
	depth := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '{':
			depth++
		case c == '}':
			if depth == 0 {
				return i
			}
			depth--
		}
	}
	return -1
}

// Static reports whether the template has no expressions (its text is then the value).
func (t *Template) Static() bool {
	for _, p := range t.parts {
		if p.prg != nil {
			return false
		}
	}
	return true
}

// String is the value as the document wrote it.
func (t *Template) String() string { return t.raw }

// Render evaluates the expressions with vars and joins the parts. A list's elements are joined
// with commas; an expression that fails to evaluate is an error.
func (t *Template) Render(vars map[string]any) (string, error) {
	if t.Static() {
		return t.raw, nil
	}
	var b strings.Builder
	for _, p := range t.parts {
		if p.prg == nil {
			b.WriteString(p.lit)
			continue
		}
		out, _, err := p.prg.Eval(activation(vars))
		if err != nil {
			return "", err
		}
		switch v := out.Value().(type) {
		case string:
			b.WriteString(v)
		case []string:
			b.WriteString(strings.Join(v, ","))
		default:
			if s, ok := out.ConvertToType(cel.StringType).Value().(string); ok {
				b.WriteString(s)
			} else {
				fmt.Fprint(&b, v)
			}
		}
	}
	return b.String(), nil
}

// Value evaluates the template as set-vars reads its values: one that is exactly one
// interpolation (${vars.list}) keeps the expression's type, as a native value (a list, a map, a
// number); any other is rendered as a string.
func (t *Template) Value(vars map[string]any) (any, error) {
	if len(t.parts) != 1 || t.parts[0].prg == nil {
		return t.Render(vars)
	}
	out, _, err := t.parts[0].prg.Eval(activation(vars))
	if err != nil {
		return nil, err
	}
	return nativeValue(out), nil
}

// nativeValue is a CEL value as plain Go data (strings, numbers, bools, nil, []any,
// map[string]any), the form the policy's own variables keep.
func nativeValue(v ref.Val) any {
	return toJSON(v)
}
