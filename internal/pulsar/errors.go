package pulsar

import (
	"context"
	"errors"
	"fmt"

	pb "quire/internal/pulsar/pulsarpb"
)

// Sentinel errors for protocol outcomes. A Backend returns them (wrapped
// with context as it likes); serverError maps them, once, to the
// ServerError code on the wire.
var (
	ErrTopicNotFound        = errors.New("pulsar: topic not found")
	ErrSubscriptionNotFound = errors.New("pulsar: subscription not found")
	ErrConsumerNotFound     = errors.New("pulsar: consumer not found")
	ErrConsumerBusy         = errors.New("pulsar: consumer busy")
	ErrProducerBusy         = errors.New("pulsar: producer busy")
	ErrProducerFenced       = errors.New("pulsar: producer fenced")
	ErrServiceNotReady      = errors.New("pulsar: service not ready")
	ErrPersistence          = errors.New("pulsar: persistence error")
	ErrNotAllowed           = errors.New("pulsar: not allowed")
	ErrTooManyRequests      = errors.New("pulsar: too many requests")
	ErrInvalidTopicName     = errors.New("pulsar: invalid topic name")
	ErrTopicTerminated      = errors.New("pulsar: topic terminated")
	ErrChecksum             = errors.New("pulsar: checksum mismatch")
	ErrUnsupportedVersion   = errors.New("pulsar: unsupported version")
	ErrMetadata             = errors.New("pulsar: metadata error")
	// ErrProducerBlockedQuota: the topic's backlog is over its quota with
	// the producer_exception policy; the client reconnects with backoff.
	ErrProducerBlockedQuota = errors.New("pulsar: producer blocked: backlog quota exceeded")
	// ErrAuthentication: CONNECT's credentials are refused (auth.go).
	ErrAuthentication = errors.New("pulsar: authentication failed")
	// ErrAuthorization: the client's role may not do what it asked.
	ErrAuthorization = errors.New("pulsar: not authorized")
)

var serverErrors = []struct {
	err  error
	code pb.ServerError
}{
	{ErrTopicNotFound, pb.ServerError_TopicNotFound},
	{ErrSubscriptionNotFound, pb.ServerError_SubscriptionNotFound},
	{ErrConsumerNotFound, pb.ServerError_ConsumerNotFound},
	{ErrConsumerBusy, pb.ServerError_ConsumerBusy},
	{ErrConsumerAssign, pb.ServerError_ConsumerAssignError},
	{ErrProducerBusy, pb.ServerError_ProducerBusy},
	{ErrProducerFenced, pb.ServerError_ProducerFenced},
	{ErrServiceNotReady, pb.ServerError_ServiceNotReady},
	{ErrPersistence, pb.ServerError_PersistenceError},
	{ErrNotAllowed, pb.ServerError_NotAllowedError},
	{ErrTooManyRequests, pb.ServerError_TooManyRequests},
	{ErrInvalidTopicName, pb.ServerError_InvalidTopicName},
	{ErrTopicTerminated, pb.ServerError_TopicTerminatedError},
	{ErrChecksum, pb.ServerError_ChecksumError},
	{ErrUnsupportedVersion, pb.ServerError_UnsupportedVersionError},
	{ErrMetadata, pb.ServerError_MetadataError},
	{ErrIncompatibleSchema, pb.ServerError_IncompatibleSchema},
	{ErrProducerBlockedQuota, pb.ServerError_ProducerBlockedQuotaExceededException},
	{ErrAuthentication, pb.ServerError_AuthenticationError},
	{ErrAuthorization, pb.ServerError_AuthorizationError},
	// A request that outlived its connection or deadline: the client
	// retries after a fresh lookup.
	{context.Canceled, pb.ServerError_ServiceNotReady},
	{context.DeadlineExceeded, pb.ServerError_ServiceNotReady},
}

// serverError maps an error to its ServerError code; known reports whether
// it is one of the sentinels (the rest are logged by the caller).
func serverError(err error) (code pb.ServerError, known bool) {
	for _, e := range serverErrors {
		if errors.Is(err, e.err) {
			return e.code, true
		}
	}
	return pb.ServerError_UnknownError, false
}

// errorf wraps a sentinel with a message.
func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
