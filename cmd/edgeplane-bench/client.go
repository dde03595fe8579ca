package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// client is a minimal HTTP/1.1 keep-alive client for the load generator. It writes prepared
// request bytes and reads one response with a Content-Length body. It costs a fraction of the
// CPU of net/http's client, so on a small machine more of the cores are left to the server under
// test; the baseline is measured with the same client, so ratios stay fair.
type client struct {
	addr string
	conn net.Conn
	br   *bufio.Reader
	body []byte
}

// ioTimeout bounds every read and write, so a stuck server cannot hang the benchmark.
const ioTimeout = 30 * time.Second

func newClient(addr string) *client { return &client{addr: addr} }

func (c *client) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// do sends r and returns the status and body of the response. The body is valid until the
// next call.
func (c *client) do(r *req) (int, []byte, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
		if err != nil {
			return 0, nil, err
		}
		c.conn = conn
		if c.br == nil {
			c.br = bufio.NewReaderSize(conn, 64<<10)
		} else {
			c.br.Reset(conn)
		}
	}
	status, body, closing, err := c.roundTrip(r.raw)
	if err != nil || closing {
		c.close()
	}
	return status, body, err
}

func (c *client) roundTrip(req []byte) (status int, body []byte, closing bool, err error) {
	_ = c.conn.SetDeadline(time.Now().Add(ioTimeout))
	if _, err = c.conn.Write(req); err != nil {
		return 0, nil, true, err
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, nil, true, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, true, fmt.Errorf("bad status line %q", line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, true, fmt.Errorf("bad status line %q", line)
	}
	length := -1
	for {
		line, err = c.br.ReadSlice('\n')
		if err != nil {
			return 0, nil, true, err
		}
		if len(line) <= 2 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, nil, true, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, nil, true, errors.New("chunked responses are not supported by the load generator")
		}
	}
	if length < 0 {
		if status == 204 || status == 304 {
			length = 0
		} else {
			return 0, nil, true, errors.New("response without Content-Length")
		}
	}
	if cap(c.body) < length {
		c.body = make([]byte, length)
	}
	c.body = c.body[:length]
	if _, err = io.ReadFull(c.br, c.body); err != nil {
		return 0, nil, true, err
	}
	return status, c.body, closing, nil
}

// req is one prepared request: its parts, and the bytes the raw client writes.
type req struct {
	method, host, path, token string
	body                      []byte
	raw                       []byte
}

// request prepares an HTTP/1.1 request with edgeplane's authentication and version headers.
func request(method, host, path, token string, body []byte) *req {
	var b bytes.Buffer
	b.WriteString(method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\n")
	if token != "" {
		b.WriteString("Authorization: Bearer " + token + "\r\n")
	}
	b.WriteString("Ngrok-Version: 2\r\n")
	if body != nil {
		b.WriteString("Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	b.WriteString("\r\n")
	b.Write(body)
	return &req{method: method, host: host, path: path, token: token, body: body, raw: b.Bytes()}
}

// doer sends requests over keep-alive connections of one load generator worker.
type doer interface {
	do(r *req) (status int, body []byte, err error)
	close()
}

// netClient is the load generator built on net/http's client, as common Go load tools are: it
// costs more CPU per request than client, so on a small machine it leaves less to the server.
// -client nethttp selects it, to compare with measurements made that way.
type netClient struct {
	hc   *http.Client
	body []byte
}

func newNetClient() *netClient {
	t := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true, Proxy: nil}
	return &netClient{hc: &http.Client{Transport: t, Timeout: ioTimeout}}
}

func (c *netClient) do(r *req) (int, []byte, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	hr, err := http.NewRequest(r.method, "http://"+r.host+r.path, body)
	if err != nil {
		return 0, nil, err
	}
	if r.token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.token)
	}
	hr.Header.Set("Ngrok-Version", "2")
	if r.body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	buf := bytes.NewBuffer(c.body[:0])
	_, err = io.Copy(buf, resp.Body)
	c.body = buf.Bytes()
	return resp.StatusCode, c.body, err
}

func (c *netClient) close() { c.hc.CloseIdleConnections() }
