package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
)

// The outbound guard's flag: the requests and connections an account's configuration makes
// edgeplane send (key sets, identity providers, http-request, SNS certificates, static
// backends) reach no loopback, private, link-local or other non-public address unless the
// operator allows them, for labs and tests whose providers run beside edgeplane.

const (
	allowPrivateFlag = "outbound-allow-private"
	allowPrivateEnv  = "EDGEPLANE_OUTBOUND_ALLOW_PRIVATE"
)

// outboundFlags are serve's outbound guard flags.
type outboundFlags struct {
	allowPrivate *bool
	fs           *flag.FlagSet
}

func addOutboundFlags(fs *flag.FlagSet) *outboundFlags {
	def, _ := strconv.ParseBool(os.Getenv(allowPrivateEnv)) // a bad value is reported by parse
	return &outboundFlags{fs: fs, allowPrivate: fs.Bool(allowPrivateFlag, def,
		"let the requests an account's configuration makes edgeplane send (JWKS, OpenID and OAuth providers, http-request, SNS certificates, static backends) reach loopback, private, link-local, carrier-grade NAT and other non-public addresses, refused by default; for labs and tests (env "+allowPrivateEnv+")")}
}

// parse returns whether non-public addresses are allowed; a variable that is not a boolean is
// refused, unless the flag, which wins, was given.
func (f *outboundFlags) parse() (bool, error) {
	if v := os.Getenv(allowPrivateEnv); v != "" && !flagGiven(f.fs, allowPrivateFlag) {
		if _, err := strconv.ParseBool(v); err != nil {
			return false, fmt.Errorf("%s must be true or false, got %q", allowPrivateEnv, v)
		}
	}
	return *f.allowPrivate, nil
}
