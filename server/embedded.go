package server

import (
	"bytes"
	"encoding/json"

	ep "github.com/edgeplane/edgeplane"
)

// addDoc renders doc into body, byte for byte as json.Marshal does (html set) or as an Encoder
// with SetEscapeHTML(false) does without its newline (html unset), and returns how many bytes it
// added.
//
// A document that embeds its children (an HTTPS edge shows its routes, up to
// ep.MaxHTTPSEdgeResponseBytes) is rendered one child at a time: the encoder would otherwise build
// the whole answer in a buffer of its own, grown by doubling, and then copy it out, so that an
// 8 MiB edge held its decoded routes, the encoder's buffer and the copy at once, some 30 MB, and
// left the buffer in the encoder's pool. Rendered piece by piece it holds each route once, and
// each decoded route goes as soon as it is rendered. This is what the process's peak memory
// followed while a hostile account read its largest edges (cmd/edgeplane TestHostileAccountRSS).
//
// doc's children are taken from it: the caller does not use doc again.
func addDoc(body *parts, doc ep.Document, childKey []byte, html bool) (int, error) {
	start := body.size
	e, ok := doc.(ep.Embedder)
	var children []ep.Document
	if ok && childKey != nil {
		children = e.Children()
	}
	if len(children) == 0 {
		b, err := marshal(doc, html)
		if err != nil {
			return 0, err
		}
		body.add(b)
		return body.size - start, nil
	}
	// The shell, with no children: its children's array is its last field, so it ends with
	// ,"<key>":[]} and the children go between the brackets. A document whose shell ends otherwise
	// is rendered whole.
	e.SetChildren(nil)
	shell, err := marshal(doc, html)
	if err != nil {
		return 0, err
	}
	tail := append(append([]byte{','}, childKey...), ":[]}"...)
	if !bytes.HasSuffix(shell, tail) {
		e.SetChildren(children)
		b, err := marshal(doc, html)
		if err != nil {
			return 0, err
		}
		body.add(b)
		return body.size - start, nil
	}
	body.add(shell[:len(shell)-2])
	for i, child := range children {
		b, err := marshal(child, html)
		if err != nil {
			return 0, err
		}
		if i > 0 {
			body.add([]byte{','})
		}
		body.add(b)
		children[i] = nil
	}
	body.add([]byte("]}"))
	return body.size - start, nil
}

// marshal is json.Marshal, or with html unset, an Encoder's rendering with SetEscapeHTML(false)
// without the newline it ends with.
func marshal(v any, html bool) ([]byte, error) {
	if html {
		return json.Marshal(v)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return b[:len(b)-1], nil
}

// bytes returns the body in one slice, for a body small enough to keep (a rendered body of the
// read cache).
func (p *parts) bytes() []byte {
	out := make([]byte, 0, p.size)
	for _, c := range p.chunks {
		out = append(out, c...)
	}
	return out
}
