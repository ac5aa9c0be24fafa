// Command kube is the Kubernetes daemons the tests run (kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet and kube-proxy) in one
// executable, each run by the name it is invoked as; build-tools links each
// name to it. Each name runs what its main package in k8s.io/kubernetes
// runs. Linking one executable takes about 15 core-seconds where linking
// five took about 40. kubectl stays an executable of its own: the tests run
// it hundreds of times, and it starts faster without the daemons' packages
// to initialize.
//
// `kube names` lists the names.
package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	_ "time/tzdata" // for CronJob time zones, as kube-apiserver and kube-controller-manager have it

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// commands are the binaries, by name; each returns its exit code.
var commands = map[string]func() int{
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":                 func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kube-proxy":              func() int { return cli.Run(proxy.NewProxyCommand()) },
}

func main() {
	if run, ok := commands[filepath.Base(os.Args[0])]; ok {
		os.Exit(run())
	}
	names := slices.Sorted(maps.Keys(commands))
	if len(os.Args) == 2 && os.Args[1] == "names" {
		fmt.Println(strings.Join(names, "\n"))
		return
	}
	fmt.Fprintf(os.Stderr, "kube: run it as one of %s (a link of that name), or as `kube names`\n", strings.Join(names, ", "))
	os.Exit(2)
}
