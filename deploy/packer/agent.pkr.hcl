# Bakes the quietbench agent into an AMI: Debian 12, the binary in
# /usr/local/bin, the systemd unit enabled, a loopback-only agent.toml.
# Packer 1.6.6 (Debian's): packer build agent.pkr.hcl
# Packer >= 1.7:           packer init . && packer build .  (plugins.pkr.hcl)

variable "region" {
  type    = string
  default = "us-east-1"
}

variable "instance_type" {
  type        = string
  default     = "t3.micro"
  description = "Instance that builds the image; any x86_64 type will do."
}

variable "base_name_pattern" {
  type        = string
  default     = "debian-12-amd64-*"
  description = "Name of the Debian base AMI; the newest match wins."
}

variable "quietbench_binary" {
  type        = string
  default     = ""
  description = "The x86_64 Linux quietbench binary to install; empty: the repository's target/release/quietbench (cargo build --release -p quietbench)."
}

locals {
  stamp  = regex_replace(timestamp(), "[- TZ:]", "")
  binary = var.quietbench_binary != "" ? var.quietbench_binary : "${path.root}/../../target/release/quietbench"
}

source "amazon-ebs" "agent" {
  region        = var.region
  instance_type = var.instance_type
  ssh_username  = "admin" # Debian's AMIs
  ami_name      = "quietbench-agent-${local.stamp}"

  source_ami_filter {
    filters = {
      name                = var.base_name_pattern
      architecture        = "x86_64"
      virtualization-type = "hvm"
      root-device-type    = "ebs"
    }
    owners      = ["136693071363"] # Debian's official AWS account
    most_recent = true
  }

  tags = {
    Name              = "quietbench-agent-${local.stamp}"
    "quietbench:role" = "agent-image"
  }
}

build {
  sources = ["source.amazon-ebs.agent"]

  provisioner "file" {
    source      = local.binary
    destination = "/tmp/quietbench"
  }

  provisioner "file" {
    source      = "${path.root}/../systemd/quietbench-agent.service"
    destination = "/tmp/quietbench-agent.service"
  }

  provisioner "file" {
    source      = "${path.root}/agent.toml"
    destination = "/tmp/agent.toml"
  }

  provisioner "shell" {
    inline = [
      "sudo install -m 0755 /tmp/quietbench /usr/local/bin/quietbench",
      "sudo install -d -m 0755 /etc/quietbench /etc/quietbench/tls",
      "sudo install -m 0644 /tmp/agent.toml /etc/quietbench/agent.toml",
      "sudo install -m 0644 /tmp/quietbench-agent.service /etc/systemd/system/quietbench-agent.service",
      "sudo systemctl daemon-reload",
      "sudo systemctl enable quietbench-agent",
      "/usr/local/bin/quietbench --version",
      "rm -f /tmp/quietbench /tmp/quietbench-agent.service /tmp/agent.toml",
    ]
  }
}
