package enforce

import "net/http"

// MisdirectedClientCert answers a request whose connection was not made with a client
// certificate the endpoint or edge accepts (its mutual TLS was turned on, or its CAs changed,
// after the keep-alive connection's handshake): 421 with ERR_NGROK_3200 and Connection: close,
// so the client connects again and that handshake asks for the certificate.
func MisdirectedClientCert(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	ErrorPage(w, http.StatusMisdirectedRequest, 3200,
		"This connection was not made with a client certificate this endpoint accepts (mutual TLS); connect again and present one.")
}
