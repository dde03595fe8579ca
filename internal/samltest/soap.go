package samltest

import (
	"encoding/xml"
	"errors"

	"github.com/beevik/etree"
	"github.com/crewjam/saml"
)

// SOAP helpers for tests that send an IdP's back-channel messages themselves (made and signed by
// crewjam/saml) and read the answers.

// SOAPEnvelope wraps el, a SAML message, in a SOAP 1.1 envelope.
func SOAPEnvelope(el *etree.Element) []byte {
	env := etree.NewElement("soapenv:Envelope")
	env.CreateAttr("xmlns:soapenv", "http://schemas.xmlsoap.org/soap/envelope/")
	env.CreateElement("soapenv:Body").AddChild(el)
	doc := etree.NewDocument()
	doc.SetRoot(env)
	b, err := doc.WriteToBytes()
	if err != nil {
		panic(err)
	}
	return b
}

// SOAPLogoutAnswer is a LogoutResponse read from a SOAP envelope: its status codes, the request
// it answers, and whether its signature verified with the service provider's metadata.
type SOAPLogoutAnswer struct {
	Status, Second, InResponseTo string
	Verified                     error
}

// ReadSOAPLogoutResponse reads the LogoutResponse of a SOAP envelope, checking its enveloped
// signature against the signing certificate of spMetadata (a service provider's metadata XML).
func ReadSOAPLogoutResponse(body, spMetadata []byte) (SOAPLogoutAnswer, error) {
	doc := etree.NewDocument()
	if err := doc.ReadFromBytes(body); err != nil {
		return SOAPLogoutAnswer{}, err
	}
	var el *etree.Element
	if doc.Root() != nil {
		if b := doc.Root().SelectElement("Body"); b != nil {
			el = b.SelectElement("LogoutResponse")
		}
	}
	if el == nil {
		return SOAPLogoutAnswer{}, errors.New("no LogoutResponse in the SOAP body")
	}
	var md saml.EntityDescriptor
	if err := xml.Unmarshal(spMetadata, &md); err != nil {
		return SOAPLogoutAnswer{}, err
	}
	a := SOAPLogoutAnswer{InResponseTo: el.SelectAttrValue("InResponseTo", ""), Verified: verifyEnveloped(el, &md)}
	if st := el.SelectElement("Status"); st != nil {
		if c := st.SelectElement("StatusCode"); c != nil {
			a.Status = c.SelectAttrValue("Value", "")
			if c2 := c.SelectElement("StatusCode"); c2 != nil {
				a.Second = c2.SelectAttrValue("Value", "")
			}
		}
	}
	return a, nil
}
