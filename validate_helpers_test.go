package edgeplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// The validate_*_test.go files hold table tests of the request rules themselves, without the
// store or HTTP: each case is a request body, decoded from JSON as the server decodes it (or
// written as a Go literal), and the outcome its Validate must give. The helpers they share are
// here.

// validator is what every request body and module request of the root package has: Validate,
// the rules that need nothing but the body.
type validator interface{ Validate() error }

// vcase is one case of a validation table: the request, and what Validate must say. A code of 0
// means the request is valid; otherwise Validate must return a 400 *Error with that code naming
// field, whose message starts with the field and, when msg is set, contains msg.
type vcase struct {
	name  string
	v     validator
	field string
	code  int
	msg   string
}

// pass is a case that must pass.
func pass(name string, v validator) vcase { return vcase{name: name, v: v} }

// fail is a case that must be refused with code, naming field.
func fail(name string, v validator, field string, code int) vcase {
	return vcase{name: name, v: v, field: field, code: code}
}

// failMsg is fail with a message that must contain msg.
func failMsg(name string, v validator, field string, code int, msg string) vcase {
	return vcase{name: name, v: v, field: field, code: code, msg: msg}
}

// runCases checks every case, each as its own subtest.
func runCases(t *testing.T, cases []vcase) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.name] {
			t.Errorf("two cases are called %q", c.name)
		}
		seen[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			checkValid(t, c.v, c.field, c.code, c.msg)
		})
	}
}

// checkValid runs v.Validate and compares the outcome with the wanted one (see vcase).
func checkValid(t *testing.T, v validator, wantField string, wantCode int, wantMsg string) {
	t.Helper()
	err := v.Validate()
	if wantCode == 0 {
		if err != nil {
			t.Errorf("refused, want valid: %v", err)
		}
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("want 400 ERR_NGROK_%d naming %q, got %T %v", wantCode, wantField, err, err)
		return
	}
	if e.Status != http.StatusBadRequest || e.Code != wantCode || e.Field != wantField {
		t.Errorf("want 400 ERR_NGROK_%d naming %q, got %d ERR_NGROK_%d naming %q: %s", wantCode, wantField, e.Status, e.Code, e.Field, e.Msg)
		return
	}
	if !strings.HasPrefix(e.Msg, wantField) {
		t.Errorf("the message does not start with the field %q: %s", wantField, e.Msg)
	}
	if wantMsg != "" && !strings.Contains(e.Msg, wantMsg) {
		t.Errorf("the message does not contain %q: %s", wantMsg, e.Msg)
	}
}

// fromJSON decodes a request body into a new T as the server does (unknown fields are refused, so a
// typo in a test's JSON cannot go unnoticed). A test body that does not decode is a bug of the
// test: it panics.
func fromJSON[T any](js string) *T {
	v := new(T)
	dec := json.NewDecoder(bytes.NewReader([]byte(js)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		panic("test body " + js + ": " + err.Error())
	}
	return v
}
