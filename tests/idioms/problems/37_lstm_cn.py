"""KernelBench's level-3 ``LSTMCn`` at small sizes: it runs ``fc`` on the LSTM's last output and throws the result
away, returning the cell state. Idioms on it (``# problem-file:``) prove that a candidate mirroring that dead code in
its kernel is no decoy, while a kernel on a dummy tensor still is."""
import torch
import torch.nn as nn

batch_size = 10
sequence_length = 512
input_size = 128
hidden_size = 256
num_layers = 6
output_size = 10
dropout = 0.0

KFORGE = {
    "sizes": {
        "cpu": {"batch_size": 4, "sequence_length": 8, "input_size": 16, "hidden_size": 32, "num_layers": 2},
        "gpu": {"batch_size": 10, "sequence_length": 512, "input_size": 128, "hidden_size": 256, "num_layers": 6},
    },
    "ops": ["lstm", "LSTM", "linear", "Linear", "addmm", "matmul", "mm"],
}


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, output_size, dropout=0.0):
        """
        Initialize the LSTM model.

        :param input_size: The number of expected features in the input `x`
        :param hidden_size: The number of features in the hidden state `h`
        :param num_layers: Number of recurrent layers
        :param output_size: The number of output features
        :param dropout: If non-zero, introduces a Dropout layer on the outputs of each LSTM layer except the last layer
        """
        super(Model, self).__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True, dropout=dropout, bidirectional=False)
        self.fc = nn.Linear(hidden_size, output_size)

    def forward(self, x, h0, c0):
        """
        :param x: The input tensor, shape (batch_size, sequence_length, input_size)
        :return: The cell state of the last time step, shape (num_layers, batch_size, hidden_size)
        """
        out, state = self.lstm(x, (h0, c0))  # out: tensor of shape (batch_size, seq_length, hidden_size)

        # Decode the hidden state of the last time step
        out = self.fc(out[:, -1, :])  # out: tensor of shape (batch_size, output_size)

        return state[1]


def get_inputs():
    return [torch.rand(batch_size, sequence_length, input_size), torch.rand((num_layers, batch_size, hidden_size)),
            torch.rand((num_layers, batch_size, hidden_size))]


def get_init_inputs():
    return [input_size, hidden_size, num_layers, output_size, dropout]
