package edgeplane

import (
	"errors"
	"strings"
	"testing"
)

// TestHeaderModuleRefusesFixedHeaders: adding or removing a hop-by-hop header, Host or
// Content-Length, in any case, is 400 ERR_NGROK_215 naming the field and the header; other
// headers pass.
func TestHeaderModuleRefusesFixedHeaders(t *testing.T) {
	for _, c := range []struct {
		m     EndpointHeadersMutate
		field string
	}{
		{EndpointHeadersMutate{Add: map[string]string{"connection": "close"}}, "add"},
		{EndpointHeadersMutate{Add: map[string]string{"X-Ok": "1", "HOST": "evil.example"}}, "add"},
		{EndpointHeadersMutate{Add: map[string]string{"Content-Length": "0"}}, "add"},
		{EndpointHeadersMutate{Remove: []string{"x-ok", "Transfer-Encoding"}}, "remove"},
		{EndpointHeadersMutate{Remove: []string{"upgrade"}}, "remove"},
		{EndpointHeadersMutate{Remove: []string{"Proxy-Authorization"}}, "remove"},
		{EndpointHeadersMutate{Remove: []string{"te"}}, "remove"},
	} {
		err := c.m.Validate()
		var e *Error
		if !errors.As(err, &e) || e.Status != 400 || e.Code != CodeInvalid || e.Field != c.field || !strings.Contains(e.Msg, "cannot be") {
			t.Errorf("%+v: %v", c.m, err)
		}
	}
	ok := EndpointHeadersMutate{Add: map[string]string{"X-Forwarded-Host": "a", "Server": "b"}, Remove: []string{"X-Forwarded-For", "User-Agent"}}
	if err := ok.Validate(); err != nil {
		t.Errorf("ordinary headers refused: %v", err)
	}
	if FixedHeader("keep-alive") == "" || FixedHeader("X-Keep-Alive") != "" {
		t.Errorf("FixedHeader")
	}
}
