package authz

import (
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

type requestCase struct {
	method string
	msg    any
	want   Request
}

func requestCases() []requestCase {
	instance := "pod"
	return []requestCase{
		{MethodDeclare, &fencev1.DeclareClusterEpochRequest{ClusterName: "east"}, Request{Method: MethodDeclare, Domain: "default", Cluster: "east"}},
		{MethodRelease, &fencev1.ReleaseFenceRequest{Domain: "payments", ClusterName: "east"}, Request{Method: MethodRelease, Domain: "payments", Cluster: "east"}},
		{MethodRevoke, &fencev1.RevokeFenceRequest{ClusterName: "east", Instance: &instance}, Request{Method: MethodRevoke, Domain: "default", Cluster: "east"}},
		{MethodForget, &fencev1.ForgetClusterRequest{ClusterName: "west"}, Request{Method: MethodForget, Domain: "default", Cluster: "west"}},
		{MethodGet, &fencev1.GetFenceRequest{Domain: "b"}, Request{Method: MethodGet, Domain: "b"}},
		{MethodWatch, &fencev1.WatchFenceRequest{}, Request{Method: MethodWatch, Domain: "default"}},
		{MethodHistory, &fencev1.GetFenceHistoryRequest{}, Request{Method: MethodHistory, Domain: "default"}},
		{"/grpc.health.v1.Health/Check", nil, Request{Method: "/grpc.health.v1.Health/Check"}},
	}
}
