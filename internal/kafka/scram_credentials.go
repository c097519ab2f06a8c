package kafka

// SCRAM credentials (KIP-554), served from the listener's credential store
// (Security.Credentials, an auth.Credentials on the metadata store):
//
//	DescribeUserScramCredentials (50) v0
//	AlterUserScramCredentials    (51) v0
//
// As Kafka's ScramImage.describe and ScramControlManager: no users (null
// or empty) describes every user; a user named twice answers
// DUPLICATE_RESOURCE, one without credentials RESOURCE_NOT_FOUND. An alter
// names each user once (deletions and upsertions together, else
// DUPLICATE_RESOURCE); an empty user name or unknown mechanism, iterations
// outside 4096–16384, deleting a credential that does not exist answer
// UNACCEPTABLE_CREDENTIAL, UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL
// and RESOURCE_NOT_FOUND with Kafka's messages. The client sends the salted
// password (kafka-configs and kadm salt it); only StoredKey and ServerKey
// derived from it are kept.
//
// Deviations: Kafka applies one request's changes in one metadata batch;
// Quire applies each user's atomically (one key per user) and the users one
// after another, so a failure part-way leaves the earlier users changed
// (each user's result says which). A salt that is empty or a salted
// password of the wrong size for the hash answers UNACCEPTABLE_CREDENTIAL
// (Kafka stores it and no login can ever match). Authorization: with an
// authorizer, DESCRIBE (describe) or ALTER (alter) on the cluster, as
// Kafka; without one, Security.SuperUsers (when set) are the only
// principals allowed; refused, CLUSTER_AUTHORIZATION_FAILED. Without either
// anyone may.

import (
	"context"
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/auth"
)

// mayManageCredentials says whether rq's principal may describe (op
// DESCRIBE) or alter (ALTER) credentials.
func mayManageCredentials(s *Server, rq *request, op auth.Operation) bool {
	if rq.authorizer() != nil {
		return s.allowedCluster(rq, op)
	}
	sec := rq.conn.sec
	return len(sec.SuperUsers) == 0 || slices.Contains(sec.SuperUsers, rq.principal)
}

func handleDescribeUserSCRAMCredentials(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	creds := rq.conn.sec.Credentials
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
		if !mayManageCredentials(s, rq, auth.OpDescribe) {
			resp.ErrorCode = rq.note(kerr.ClusterAuthorizationFailed.Code)
			resp.ErrorMessage = errorMessage(resp.ErrorCode)
			return resp
		}
		var names []string // nil: every user
		seen := make(map[string]int)
		for _, u := range req.Users {
			if seen[u.Name]++; seen[u.Name] == 1 {
				names = append(names, u.Name)
			}
		}
		described, err := creds.Describe(ctx, names)
		if err != nil {
			resp.ErrorCode = rq.note(s.errorCode(err, "describe SCRAM credentials"))
			resp.ErrorMessage = errorMessage(resp.ErrorCode)
			return resp
		}
		if names == nil {
			names = auth.Users(described)
		}
		for _, name := range names {
			r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
			r.User = name
			infos, ok := described[name]
			switch {
			case seen[name] > 1:
				r.ErrorCode = rq.note(kerr.DuplicateResource.Code)
				r.ErrorMessage = kmsg.StringPtr("Cannot describe SCRAM credentials for the same user twice in a single request: " + name)
			case !ok:
				r.ErrorCode = rq.note(kerr.ResourceNotFound.Code)
				r.ErrorMessage = kmsg.StringPtr("Attempt to describe a user credential that does not exist: " + name)
			}
			if r.ErrorCode == 0 {
				for _, info := range infos {
					ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
					ci.Mechanism, ci.Iterations = int8(info.Mechanism), int32(info.Iterations)
					r.CredentialInfos = append(r.CredentialInfos, ci)
				}
			}
			resp.Results = append(resp.Results, r)
		}
		return resp
	}
}

// alterFailure is a user's refused change.
type alterFailure struct {
	code    int16
	message string
}

// credentialChange is one user's deletion or upsertion.
type credentialChange struct {
	user     string
	deletion *kmsg.AlterUserSCRAMCredentialsRequestDeletion
	upsert   *kmsg.AlterUserSCRAMCredentialsRequestUpsertion
}

func handleAlterUserSCRAMCredentials(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.AlterUserSCRAMCredentialsRequest)
	creds := rq.conn.sec.Credentials
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
		result := func(user string, code int16, msg string) {
			r := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
			r.User, r.ErrorCode = user, rq.note(code)
			if code != 0 {
				r.ErrorMessage = &msg
			}
			resp.Results = append(resp.Results, r)
		}
		if !mayManageCredentials(s, rq, auth.OpAlter) {
			var users []string
			for _, d := range req.Deletions {
				users = append(users, d.Name)
			}
			for _, u := range req.Upsertions {
				users = append(users, u.Name)
			}
			slices.Sort(users)
			for _, u := range slices.Compact(users) {
				result(u, kerr.ClusterAuthorizationFailed.Code, kerr.ClusterAuthorizationFailed.Message)
			}
			return resp
		}
		// Validate as ScramControlManager.alterCredentials: one change
		// per user, the first error wins; results in first-seen order.
		var order []string
		changes := make(map[string]*credentialChange)
		failed := make(map[string]alterFailure)
		see := func(user string) {
			if changes[user] == nil && failed[user] == (alterFailure{}) {
				order = append(order, user)
			}
		}
		fail := func(user string, code int16, msg string) {
			see(user)
			failed[user] = alterFailure{code, msg}
			delete(changes, user)
		}
		check := func(user string, mechanism int8) bool {
			switch {
			case failed[user] != (alterFailure{}):
			case changes[user] != nil:
				fail(user, kerr.DuplicateResource.Code, "A user credential cannot be altered twice in the same request")
			case user == "":
				fail(user, kerr.UnacceptableCredential.Code, "Username must not be empty")
			case !auth.Mechanism(mechanism).Valid():
				fail(user, kerr.UnsupportedSaslMechanism.Code, "Unknown SCRAM mechanism")
			default:
				return true
			}
			return false
		}
		for i := range req.Deletions {
			if d := &req.Deletions[i]; check(d.Name, d.Mechanism) {
				see(d.Name)
				changes[d.Name] = &credentialChange{user: d.Name, deletion: d}
			}
		}
		for i := range req.Upsertions {
			u := &req.Upsertions[i]
			if !check(u.Name, u.Mechanism) {
				continue
			}
			switch {
			case u.Iterations < auth.MinIterations:
				fail(u.Name, kerr.UnacceptableCredential.Code, "Too few iterations")
			case u.Iterations > auth.MaxIterations:
				fail(u.Name, kerr.UnacceptableCredential.Code, "Too many iterations")
			default:
				see(u.Name)
				changes[u.Name] = &credentialChange{user: u.Name, upsert: u}
			}
		}
		for _, user := range order {
			if f, ok := failed[user]; ok {
				result(user, f.code, f.message)
				continue
			}
			code, msg := s.applyCredentialChange(ctx, creds, changes[user])
			result(user, code, msg)
		}
		return resp
	}
}

func (s *Server) applyCredentialChange(ctx context.Context, creds *auth.Credentials, ch *credentialChange) (int16, string) {
	var err error
	if ch.deletion != nil {
		err = creds.Delete(ctx, ch.user, auth.Mechanism(ch.deletion.Mechanism))
	} else {
		u := ch.upsert
		var cred auth.SCRAMCredential
		cred, err = auth.SCRAMCredentialFromSalted(auth.Mechanism(u.Mechanism), u.Salt, u.SaltedPassword, int(u.Iterations))
		if err == nil {
			err = creds.Upsert(ctx, ch.user, cred)
		}
	}
	switch {
	case err == nil:
		return 0, ""
	case errors.Is(err, auth.ErrUnknownUser), errors.Is(err, auth.ErrUnknownCredential):
		return kerr.ResourceNotFound.Code, "Attempt to delete a user credential that does not exist"
	case errors.Is(err, auth.ErrBadSaltedPassword), errors.Is(err, auth.ErrEmptyUser):
		return kerr.UnacceptableCredential.Code, err.Error()
	}
	code := s.errorCode(err, "alter SCRAM credentials", "user", ch.user)
	return code, kerr.ErrorForCode(code).Error()
}
