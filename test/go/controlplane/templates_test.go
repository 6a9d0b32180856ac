// Package controlplane_test drives a running locale2b control plane's
// TemplateService with the generated Go client (connect-go), as a Go user of
// the Connect API would, over Connect binary, Connect JSON and gRPC on h2c.
//
//	LOCALE2B_API_URL=http://127.0.0.1:3000 LOCALE2B_API_KEY=e2b_... go test ./controlplane/
//
// test/envd/go-client.test.ts starts a control plane and runs this.
package controlplane_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	controlplanev1 "github.com/locale2b/locale2b/gen/go/locale2b/controlplane/v1"
	"github.com/locale2b/locale2b/gen/go/locale2b/controlplane/v1/controlplanev1connect"
)

func server(t *testing.T) (string, string) {
	t.Helper()
	u, key := os.Getenv("LOCALE2B_API_URL"), os.Getenv("LOCALE2B_API_KEY")
	if u == "" || key == "" {
		t.Skip("LOCALE2B_API_URL and LOCALE2B_API_KEY are not set: point them at a running control plane (test/envd/go-client.test.ts does this)")
	}
	return strings.TrimRight(u, "/"), key
}

// apiKey sends the key on every request, unary and streaming.
type apiKey string

func (k apiKey) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("X-API-KEY", string(k))
		return next(ctx, req)
	}
}

func (k apiKey) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("X-API-KEY", string(k))
		return conn
	}
}

func (k apiKey) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func clients(base, key string) map[string]controlplanev1connect.TemplateServiceClient {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &protocols}}
	auth := connect.WithInterceptors(apiKey(key))
	return map[string]controlplanev1connect.TemplateServiceClient{
		"connect-binary-http1": controlplanev1connect.NewTemplateServiceClient(http.DefaultClient, base, auth),
		"connect-json-http1":   controlplanev1connect.NewTemplateServiceClient(http.DefaultClient, base, auth, connect.WithProtoJSON()),
		"grpc-h2c":             controlplanev1connect.NewTemplateServiceClient(h2c, base, auth, connect.WithGRPC()),
	}
}

// A requested build waits for its start: its status, a watch's first message,
// then the template is deleted; bad input has its Connect code.
func TestTemplateRequestWatchDelete(t *testing.T) {
	base, key := server(t)
	for name, c := range clients(base, key) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tmpl := fmt.Sprintf("go-%s-%d", strings.ReplaceAll(name, "-http1", ""), time.Now().UnixNano())

			req, err := c.RequestBuild(ctx, connect.NewRequest(&controlplanev1.RequestBuildRequest{Name: tmpl + ":v1"}))
			if err != nil {
				t.Fatalf("RequestBuild: %v", err)
			}
			if got := req.Msg.GetTags(); len(got) != 1 || got[0] != "v1" {
				t.Fatalf("tags = %v, want [v1]", got)
			}
			templateID, buildID := req.Msg.GetTemplateId(), req.Msg.GetBuildId()

			status, err := c.GetBuildStatus(ctx, connect.NewRequest(&controlplanev1.GetBuildStatusRequest{TemplateId: tmpl, BuildId: buildID}))
			if err != nil {
				t.Fatalf("GetBuildStatus: %v", err)
			}
			if s := status.Msg.GetBuild().GetStatus(); s != controlplanev1.BuildStatus_BUILD_STATUS_WAITING {
				t.Fatalf("status = %v, want WAITING", s)
			}

			// The watch's first message says it is on; a waiting build sends nothing more until it starts.
			watchCtx, stop := context.WithCancel(ctx)
			stream, err := c.WatchBuild(watchCtx, connect.NewRequest(&controlplanev1.WatchBuildRequest{TemplateId: templateID, BuildId: buildID}))
			if err != nil {
				t.Fatalf("WatchBuild: %v", err)
			}
			if !stream.Receive() {
				t.Fatalf("WatchBuild ended before its first message: %v", stream.Err())
			}
			if m := stream.Msg(); m.GetStatus() != controlplanev1.BuildStatus_BUILD_STATUS_WAITING || m.GetLogEntry() != nil || m.GetBuild() != nil {
				t.Fatalf("first watch message = %v, want only status WAITING", m)
			}
			stop()
			stream.Close()

			exists, err := c.TemplateExists(ctx, connect.NewRequest(&controlplanev1.TemplateExistsRequest{Name: tmpl}))
			if err != nil || !exists.Msg.GetExists() || exists.Msg.GetTemplateId() != templateID {
				t.Fatalf("TemplateExists = %v, %v; want exists with id %s", exists, err, templateID)
			}

			_, err = c.StartBuild(ctx, connect.NewRequest(&controlplanev1.StartBuildRequest{
				TemplateId: templateID,
				BuildId:    buildID,
				Steps:      []*controlplanev1.BuildStep{{Type: "FROB"}},
			}))
			expectCode(t, err, connect.CodeInvalidArgument, "unknown step type 'FROB'")
			_, err = c.RequestBuild(ctx, connect.NewRequest(&controlplanev1.RequestBuildRequest{Name: "Not A Name"}))
			expectCode(t, err, connect.CodeInvalidArgument, "invalid template name")

			if _, err := c.DeleteTemplate(ctx, connect.NewRequest(&controlplanev1.DeleteTemplateRequest{TemplateId: tmpl})); err != nil {
				t.Fatalf("DeleteTemplate: %v", err)
			}
			_, err = c.GetTemplate(ctx, connect.NewRequest(&controlplanev1.GetTemplateRequest{TemplateId: templateID}))
			expectCode(t, err, connect.CodeNotFound, "not found")
		})
	}
}

func expectCode(t *testing.T, err error, code connect.Code, text string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != code || !strings.Contains(ce.Message(), text) {
		t.Fatalf("error = %v, want %v containing %q", err, code, text)
	}
}
