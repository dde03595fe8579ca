package edgeplane

// routeAuth holds the route modules that authenticate visitors. (Filled in by the auth modules
// change: OAuth, SAML, OIDC, JWT validation, user agent filter.)
type routeAuth struct{}

// routeAuthBody is the request side of routeAuth.
type routeAuthBody struct{}

// routeAuthModules are the module table entries of routeAuth.
var routeAuthModules []*Module
