// Package auth owns who a client is: the principal model (`User:<name>`,
// shared by the Kafka front end now and by ACLs and the Pulsar front end
// later), the user database (SCRAM credentials in the metadata store,
// credentials.go) and the server side of the SASL mechanisms PLAIN and
// SCRAM-SHA-256/512 (sasl.go, scram.go), as exchanges of opaque tokens that know
// nothing of any wire protocol; and Kafka's ACLs (acl.go: the model and the
// Authorizer's decisions, as Kafka's StandardAuthorizer; acl_store.go: one
// key per ACL in the metadata store, followed into an in-memory copy).
//
// It must never keep a password: a SCRAM credential is a salt, an iteration
// count, StoredKey and ServerKey (RFC 5802), and PLAIN is checked by deriving
// StoredKey from the password it is given and comparing. Authentication
// decides who a client is; the Authorizer decides what a principal may do,
// and never waits for the store to do so.
package auth

// PrincipalTypeUser is Kafka's principal type for SASL users (and the one
// Kafka's ACLs and super.users name).
const PrincipalTypeUser = "User"

// Principal is an authenticated identity: Type:Name, as Kafka writes them.
type Principal struct {
	Type string
	Name string
}

// Anonymous is the principal of a connection on a listener without
// authentication (Kafka's User:ANONYMOUS).
var Anonymous = Principal{Type: PrincipalTypeUser, Name: "ANONYMOUS"}

// User returns the principal User:name.
func User(name string) Principal { return Principal{Type: PrincipalTypeUser, Name: name} }

func (p Principal) String() string { return p.Type + ":" + p.Name }
