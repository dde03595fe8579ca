package edgeplane

import "strings"

// BotUser is a non-human principal that can own API keys and credentials (schema "BotUser").
// A bot user is never an admin. When it is inactive its API keys stop authenticating; deleting
// it deletes the keys and credentials it owns.
type BotUser struct {
	Meta
	Name   string `json:"name"`
	Active bool   `json:"active"`
}

// BotUserCreate is the body of POST /bot_users.
type BotUserCreate struct {
	Echo
	Name   *string `json:"name"`
	Active *bool   `json:"active"`
}

// Validate requires a name.
func (c *BotUserCreate) Validate() error {
	if c.Name == nil || strings.TrimSpace(*c.Name) == "" {
		return Invalid(CodeInvalid, "name", "is required")
	}
	return maxBytes("name", *c.Name, MaxDescription)
}

// Create builds the bot user and registers it as a principal of the account.
func (c *BotUserCreate) Create(op *Op) (Document, error) {
	b := &BotUser{Name: *c.Name, Active: c.Active == nil || *c.Active}
	return b, op.Tx.PutPrincipal(b.principal(op))
}

// BotUserUpdate is the body of PATCH /bot_users/{id}.
type BotUserUpdate struct {
	Echo
	Name   *string `json:"name"`
	Active *bool   `json:"active"`
}

// Validate refuses an empty name.
func (u *BotUserUpdate) Validate() error {
	if u.Name == nil {
		return nil
	}
	if strings.TrimSpace(*u.Name) == "" {
		return Invalid(CodeInvalid, "name", "must not be empty")
	}
	return maxBytes("name", *u.Name, MaxDescription)
}

// Apply changes the name or the active flag; the principal row follows the flag.
func (u *BotUserUpdate) Apply(op *Op, doc Document) error {
	b := doc.(*BotUser)
	if u.Name != nil {
		b.Name = *u.Name
	}
	if u.Active != nil && *u.Active != b.Active {
		b.Active = *u.Active
		return op.Tx.PutPrincipal(b.principal(op))
	}
	return nil
}

func (b *BotUser) principal(op *Op) Principal {
	return Principal{ID: op.ID, AccountID: op.Caller.AccountID, Role: RoleBot, Active: b.Active}
}

func deleteBotPrincipal(op *Op, doc Document) error {
	return op.Tx.DeletePrincipal(doc.Base().ID)
}
