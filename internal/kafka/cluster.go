package kafka

// DescribeCluster (key 60), versions 0–2.
//
// Brokers from Backend.Brokers, cluster and controller ids from the
// Backend. Deviations: endpoint type 2 (controllers, KIP-919) answers
// UNSUPPORTED_ENDPOINT_TYPE (Quire has no KRaft controllers to list);
// authorized operations are −2147483648; no broker is ever fenced.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleDescribeCluster(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.DescribeClusterRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
		resp.ClusterID = s.backend.ClusterID()
		resp.ControllerID = s.backend.ControllerID()
		resp.ClusterAuthorizedOperations = authorizedOperationsOmitted
		resp.EndpointType = req.EndpointType
		if req.Version >= 1 && req.EndpointType != 1 {
			resp.ErrorCode = rq.note(kerr.UnsupportedEndpointType.Code)
			resp.ErrorMessage = errorMessage(resp.ErrorCode)
			return resp
		}
		brokers, err := s.backend.Brokers(ctx)
		if code := s.errorCode(err, "describe cluster: brokers"); code != 0 {
			resp.ErrorCode = rq.note(code)
			resp.ErrorMessage = errorMessage(code)
			return resp
		}
		for _, b := range brokers {
			e, ok := b.Endpoint(rq.listener())
			if !ok {
				continue // no listener of this connection's name there
			}
			rb := kmsg.NewDescribeClusterResponseBroker()
			rb.NodeID, rb.Host, rb.Port, rb.Rack = b.ID, e.Host, e.Port, b.Rack
			resp.Brokers = append(resp.Brokers, rb)
		}
		return resp
	}
}
