package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

// baselineServer is the bare net/http server every edgeplane figure is compared with: GET answers
// a fixed JSON body (the bytes of an edgeplane GET response), POST and PATCH decode a JSON body
// the size of edgeplane's create body and answer 201 (200 for PATCH) with the same fixed body. No
// authentication, no database: the limit of this machine for this kind of server.
func baselineServer(args []string) error {
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	bodyPath := fs.String("body", "", "file holding the response body")
	if err := fs.Parse(args); err != nil {
		return err
	}
	body, err := os.ReadFile(*bodyPath)
	if err != nil {
		return err
	}
	length := strconv.Itoa(len(body))
	type createBody struct {
		ID          *string `json:"id"`
		Description *string `json:"description"`
		Metadata    *string `json:"metadata"`
		CIDR        *string `json:"cidr"`
		IPPolicyID  *string `json:"ip_policy_id"`
		Action      *string `json:"action"`
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status := http.StatusOK
		switch r.Method {
		case http.MethodGet:
		case http.MethodPost, http.MethodPatch:
			data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
			var v createBody
			if err == nil {
				err = json.Unmarshal(data, &v)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if r.Method == http.MethodPost {
				status = http.StatusCreated
			}
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", length)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	})
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintln(os.Stderr, "baseline listening on", *listen)
	return srv.ListenAndServe()
}
