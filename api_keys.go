package edgeplane

// APIKey is a bearer token for this API (spec "APIKey"). Token is set only in the create
// response; the store keeps a hash of it in a side table, never in the document.
type APIKey struct {
	Meta
	Annotations
	Token   *string `json:"token"`
	OwnerID string  `json:"owner_id"`
}

// SetToken shows the token in the create response.
func (k *APIKey) SetToken(plain string) { k.Token = &plain }

// References makes deleting a bot user delete the keys it owns.
func (k *APIKey) References() []Reference {
	return []Reference{{To: k.OwnerID, Mode: RefCascade}}
}

// APIKeyCreate is the body of POST /api_keys.
type APIKeyCreate struct {
	Echo
	AnnotationFields
	OwnerID *string `json:"owner_id"`
}

// Create builds the key and issues its token.
func (c *APIKeyCreate) Create(op *Op) (Document, error) {
	owner, err := op.Owner(c.OwnerID)
	if err != nil {
		return nil, err
	}
	k := &APIKey{OwnerID: owner}
	c.ApplyTo(&k.Annotations)
	op.IssueToken(owner)
	return k, nil
}

// APIKeyUpdate is the body of PATCH /api_keys/{id}. The owner is fixed at creation.
type APIKeyUpdate struct {
	Echo
	AnnotationFields
}

// Apply changes description and metadata.
func (u *APIKeyUpdate) Apply(op *Op, doc Document) error {
	u.ApplyTo(&doc.(*APIKey).Annotations)
	return nil
}
