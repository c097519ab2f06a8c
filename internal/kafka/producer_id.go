package kafka

// InitProducerId (key 22), versions 0–5.
//
// A null transactional id allocates an idempotent producer id (epoch 0)
// from Backend.InitProducerID; a transactional id goes to the transaction
// coordinator (transactions.go), or, without one, answers
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED (transactions are then not
// advertised, and clients treat it as fatal instead of retrying). Deviation:
// an idempotent (non-transactional) v3+ request naming
// an existing producer id and epoch (KIP-360 epoch bump) gets a new id
// rather than a bumped epoch, which idempotent producers accept.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleInitProducerID(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.InitProducerIDRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		if req.TransactionalID != nil {
			s.initTransactionalProducerID(ctx, rq, req, resp) // transactions.go
			return resp
		}
		id, epoch, err := s.backend.InitProducerID(ctx)
		if code := s.errorCode(err, "init producer id"); code != 0 {
			resp.ErrorCode = rq.note(code)
			return resp
		}
		resp.ProducerID, resp.ProducerEpoch = id, epoch
		return resp
	}
}
