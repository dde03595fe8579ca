package samltest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1" //nolint:gosec // saml-bindings §3.6.4.1 defines the SourceID as SHA-1
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"time"

	"github.com/beevik/etree"
	"github.com/crewjam/saml"
	dsig "github.com/russellhaering/goxmldsig"
)

// The HTTP-Artifact binding at the test IdP, which crewjam/saml's IdP side does not do: with
// AnswerWithArtifacts set, the response crewjam/saml makes (signed as for HTTP-POST) is kept,
// and the browser takes a type 0x0004 artifact naming it to the ACS instead; the service
// provider resolves it at /artifact with a signed ArtifactResolve over the SOAP binding, which
// the IdP checks (signature by the service provider's metadata certificate), answering once per
// artifact with an ArtifactResponse signed by goxmldsig.

// issuedArtifact is a response waiting to be resolved, for the service provider whose ACS is acs.
type issuedArtifact struct {
	response []byte
	acs      string
	expires  time.Time
}

// Resolve is an ArtifactResolve the IdP received: its artifact, its issuer, and whether its
// signature verified with the signing certificate of that service provider's metadata.
type Resolve struct {
	Artifact, Issuer string
	Verified         error
}

// ArtifactURL is the IdP's artifact resolution service (SOAP binding, index 1 in Metadata).
func (i *IdP) ArtifactURL() string { return i.Server.URL + "/artifact" }

// CertPEM is the certificate of the IdP's HTTPS server (NewTLSIdP), for a client to trust.
func (i *IdP) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: i.Server.Certificate().Raw})
}

// AnswerWithArtifacts makes the IdP answer sign-ins with an artifact, taken to the ACS with
// binding: HTTP-Redirect (a GET with SAMLart in the query) or HTTP-POST (a form with SAMLart);
// "" goes back to POSTing the response itself.
func (i *IdP) AnswerWithArtifacts(binding string) {
	i.mu.Lock()
	i.artifactBinding = binding
	i.mu.Unlock()
}

// TamperArtifactResponses has fn change every ArtifactResponse before it is signed (nil: none).
func (i *IdP) TamperArtifactResponses(fn func(*etree.Element)) {
	i.mu.Lock()
	i.artifactTamper = fn
	i.mu.Unlock()
}

// SignArtifactResponsesWith makes the IdP sign ArtifactResponses with key and cert instead of
// its own (nil: its own).
func (i *IdP) SignArtifactResponsesWith(key *rsa.PrivateKey, cert *x509.Certificate) {
	i.mu.Lock()
	i.artifactKey, i.artifactCert = key, cert
	i.mu.Unlock()
}

// Resolves returns the ArtifactResolves received so far.
func (i *IdP) Resolves() []Resolve {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]Resolve(nil), i.resolves...)
}

// UnknownArtifact is a well-formed artifact of this IdP that names no response.
func (i *IdP) UnknownArtifact() string {
	var handle [20]byte
	_, _ = rand.Read(handle[:])
	return i.artifact(handle)
}

// artifact is the type 0x0004 artifact of handle: TypeCode, EndpointIndex 1, SourceID (SHA-1
// of the entity id), MessageHandle.
func (i *IdP) artifact(handle [20]byte) string {
	b := make([]byte, 0, 44)
	b = binary.BigEndian.AppendUint16(b, 4)
	b = binary.BigEndian.AppendUint16(b, 1)
	src := sha1.Sum([]byte(i.IDP.Metadata().EntityID)) //nolint:gosec // the SourceID's definition
	b = append(b, src[:]...)
	b = append(b, handle[:]...)
	return base64.StdEncoding.EncodeToString(b)
}

// answering runs h, an IdP handler that may answer with a SAMLResponse form, and when artifacts
// are on, replaces that form with an artifact for the response it carries.
func (i *IdP) answering(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		i.mu.Lock()
		binding := i.artifactBinding
		i.mu.Unlock()
		if binding == "" {
			h(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h(rec, r)
		f, ok := ParseForm(rec.Body.Bytes())
		raw, err := base64.StdEncoding.DecodeString(f.Values.Get("SAMLResponse"))
		if !ok || f.Values.Get("SAMLResponse") == "" || err != nil {
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		var handle [20]byte
		_, _ = rand.Read(handle[:])
		i.mu.Lock()
		i.artifacts[handle] = issuedArtifact{response: raw, acs: f.Action, expires: time.Now().Add(time.Minute)}
		i.mu.Unlock()
		v := url.Values{"SAMLart": {i.artifact(handle)}}
		if relay := f.Values.Get("RelayState"); relay != "" {
			v.Set("RelayState", relay)
		}
		if binding == saml.HTTPRedirectBinding {
			http.Redirect(w, r, f.Action+"?"+v.Encode(), http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<html><body><form method="post" action="%s">`, html.EscapeString(f.Action))
		for k := range v {
			fmt.Fprintf(w, `<input type="hidden" name="%s" value="%s" />`, html.EscapeString(k), html.EscapeString(v.Get(k)))
		}
		fmt.Fprint(w, `</form></body></html>`)
	}
}

// serveArtifactResolve is the artifact resolution service: a SOAP ArtifactResolve signed by a
// known service provider gets, once, the response its artifact names when it was issued to that
// service provider (an ACS of its metadata); anything else an ArtifactResponse without one.
func (i *IdP) serveArtifactResolve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || r.Method != http.MethodPost {
		http.Error(w, "a SOAP POST is expected", http.StatusBadRequest)
		return
	}
	doc := etree.NewDocument()
	var req *etree.Element
	if doc.ReadFromBytes(body) == nil && doc.Root() != nil {
		if b := doc.Root().SelectElement("Body"); b != nil {
			req = b.SelectElement("ArtifactResolve")
		}
	}
	if req == nil {
		http.Error(w, "no ArtifactResolve", http.StatusBadRequest)
		return
	}
	res := Resolve{Issuer: childText(req, "Issuer"), Artifact: childText(req, "Artifact")}
	res.Verified = errors.New("the service provider is unknown")
	var md *saml.EntityDescriptor
	if m, err := (spProvider{i}).GetServiceProvider(r, res.Issuer); err == nil {
		md = m
		res.Verified = verifyEnveloped(req, md)
	}
	i.mu.Lock()
	i.resolves = append(i.resolves, res)
	i.mu.Unlock()

	status := saml.StatusSuccess
	var answer []byte
	if res.Verified != nil {
		status = saml.StatusRequester
	} else if raw, err := base64.StdEncoding.DecodeString(res.Artifact); err == nil && len(raw) == 44 {
		var handle [20]byte
		copy(handle[:], raw[24:])
		i.mu.Lock()
		a, ok := i.artifacts[handle]
		delete(i.artifacts, handle) // resolved once only (saml-bindings §3.6.5.2)
		i.mu.Unlock()
		if ok && time.Now().Before(a.expires) && hasACS(md, a.acs) {
			answer = a.response
		}
	}
	out, err := i.artifactResponse(req.SelectAttrValue("ID", ""), status, answer)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/xml; charset=utf-8")
	_, _ = w.Write(out)
}

// artifactResponse is the signed ArtifactResponse to the ArtifactResolve inResponseTo, with
// response (the Response XML, none when nil), in a SOAP envelope.
func (i *IdP) artifactResponse(inResponseTo, status string, response []byte) ([]byte, error) {
	ar := saml.ArtifactResponse{ID: fmt.Sprintf("id-%d", time.Now().UnixNano()), InResponseTo: inResponseTo, Version: "2.0",
		IssueInstant: saml.TimeNow(), Issuer: &saml.Issuer{Format: "urn:oasis:names:tc:SAML:2.0:nameid-format:entity", Value: i.IDP.Metadata().EntityID},
		Status: saml.Status{StatusCode: saml.StatusCode{Value: status}}}
	el := ar.Element()
	el.RemoveChildAt(len(el.Child) - 1) // the empty Response Element always writes
	if response != nil {
		doc := etree.NewDocument()
		if err := doc.ReadFromBytes(response); err != nil {
			return nil, err
		}
		el.AddChild(doc.Root())
	}
	i.mu.Lock()
	tamper, key, cert := i.artifactTamper, i.artifactKey, i.artifactCert
	i.mu.Unlock()
	if tamper != nil {
		tamper(el)
	}
	if key == nil {
		key, cert = i.IDP.Key.(*rsa.PrivateKey), i.IDP.Certificate
	}
	ctx := dsig.NewDefaultSigningContext(dsig.TLSCertKeyStore(tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key}))
	ctx.Canonicalizer = dsig.MakeC14N10ExclusiveCanonicalizerWithPrefixList("")
	if err := ctx.SetSignatureMethod(dsig.RSASHA256SignatureMethod); err != nil {
		return nil, err
	}
	signed, err := ctx.SignEnveloped(el)
	if err != nil {
		return nil, err
	}
	env := etree.NewElement("soapenv:Envelope")
	env.CreateAttr("xmlns:soapenv", "http://schemas.xmlsoap.org/soap/envelope/")
	env.CreateElement("soapenv:Body").AddChild(signed)
	out := etree.NewDocument()
	out.SetRoot(env)
	return out.WriteToBytes()
}

func childText(el *etree.Element, tag string) string {
	if c := el.SelectElement(tag); c != nil {
		return c.Text()
	}
	return ""
}

// hasACS reports whether the service provider's metadata has an ACS at location.
func hasACS(md *saml.EntityDescriptor, location string) bool {
	for _, d := range md.SPSSODescriptors {
		for _, e := range d.AssertionConsumerServices {
			if e.Location == location {
				return true
			}
		}
	}
	return false
}
