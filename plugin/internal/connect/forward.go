package connect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// forward opens a port-forward to the Pod's port on a free loopback port and
// returns its address once it listens, or an error when ctx ends first. The
// port-forward lasts until life ends.
func forward(ctx, life context.Context, cfg *rest.Config, pod *corev1.Pod, port int) (string, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	url := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", err
	}
	// As kubectl port-forward: WebSockets first, SPDY where the API server
	// or a proxy on the way does not upgrade to them.
	var dialer httpstream.Dialer = spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, url)
	ws, err := portforward.NewSPDYOverWebsocketDialer(url, cfg)
	if err != nil {
		return "", err
	}
	dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddressesWithContext(life, dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, ready, io.Discard, io.Discard)
	if err != nil {
		return "", err
	}
	failed := make(chan error, 1)
	go func() { failed <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-failed:
		if err == nil {
			err = errors.New("ended before it was ready")
		}
		return "", fmt.Errorf("port-forward to ipam Pod %s/%s port %d: %w\nfix: the Pod must be running on a node; you need get and create on pods/portforward in %s (ClusterRole ipledger:kubectl-plugin); or pass --ipam-address",
			pod.Namespace, pod.Name, port, err, pod.Namespace)
	case <-ctx.Done():
		return "", fmt.Errorf("port-forward to ipam Pod %s/%s port %d: not ready: %w", pod.Namespace, pod.Name, port, ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(int(ports[0].Local)), nil
}
