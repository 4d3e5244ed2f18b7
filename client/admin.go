package client

import "context"

// Admin runs one admin verb of a hub with credentials and access rules
// (token_issue, token_list, token_revoke, role_grant, role_revoke,
// role_list, acl_check; hub/verbs_access.go) and returns its answer, of
// type okType, or a *Refused (error_code admin_required when this client
// is neither the operator's shared token nor a credential with role
// synapse/admin). A hub without these verbs answers "Unknown message
// type", which comes back as a *Refused too.
func (c *Client) Admin(ctx context.Context, typ string, fields map[string]any, okType string) (Frame, error) {
	m := c.envelope(typ, "")
	for k, v := range fields {
		m[k] = v
	}
	match := func(f Frame) (bool, bool) {
		ok := f.Type == okType || f.Type == "error"
		return ok, ok
	}
	return c.reply(ctx, m, "", okType, match)
}
